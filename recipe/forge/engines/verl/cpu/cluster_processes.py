"""The one-machine Ray cluster helper (scripts/verl_cpu_cluster.py on cpu/local_cluster.py) signalled in the middle
of a run, on a machine without ``~/.ray``: what it leaves behind (tests/verl_engine/test_local_cluster.py and
scripts/reliability_attacks/received.py run it)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from recipe.forge.engines.verl.cpu.local_cluster import MARKER
from recipe.forge.engines.verl.reaper import end_processes, processes_with

REPO = Path(__file__).resolve().parents[5]


@dataclass
class SignalledCluster:
    came_up: bool  # the cluster started and the run began (else ``output`` says why)
    exit_code: int | None  # the script's (None: killed by the signal)
    token_private: bool  # the cluster's token file and its folder were readable by their owner only
    home_written: bool  # anything was written under the (fresh) home folder's .ray
    processes_left: int  # the cluster's processes still running ``wait_s`` after the signal (then ended here)
    temp_left: bool  # the cluster's temp folder still there then (then removed here)
    output: str  # the script's stderr, last lines


def _cluster_child(script: psutil.Process) -> tuple[str, str] | None:
    """(marker entry, token file) of the script's run (verl_cpu_smoke.py, started once the cluster is up), from the
    cluster's environment it carries."""
    for child in script.children(recursive=True):
        try:
            if not any(arg.endswith("verl_cpu_smoke.py") for arg in child.cmdline()):
                continue
            environ = child.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if MARKER in environ and "RAY_AUTH_TOKEN_PATH" in environ:
            return f"{MARKER}={environ[MARKER]}", environ["RAY_AUTH_TOKEN_PATH"]
    return None


def signal_the_cluster_script(sig: int, home: Path, nodes: int = 1, up_timeout_s: float = 300.0,
                              wait_s: float = 60.0) -> SignalledCluster:
    """Run scripts/verl_cpu_cluster.py with ``HOME=home`` (a fresh machine: no ``~/.ray``), send it ``sig`` once its
    cluster is up and the run has started, and report what is left ``wait_s`` later. Whatever is left is ended and
    removed here, so the attack leaves nothing behind itself."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "script.err"
    with log.open("w") as err:
        script = subprocess.Popen([sys.executable, str(REPO / "scripts" / "verl_cpu_cluster.py"), "--nodes",
                                   str(nodes), "--cpus-per-node", "2"], cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=err, env={**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)})
    found, deadline = None, time.monotonic() + up_timeout_s
    while found is None and script.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            found = _cluster_child(psutil.Process(script.pid))
        except psutil.NoSuchProcess:
            break
    if found is None:
        script.kill()
        script.wait()
        return SignalledCluster(False, script.returncode, False, (home / ".ray").exists(), 0, False,
                                log.read_text()[-3000:])
    marker, token_file = found
    token, folder = Path(token_file), Path(token_file).parent
    private = (stat.S_IMODE(token.stat().st_mode) & 0o077 == 0) and (stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0)
    script.send_signal(sig)
    try:
        script.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        script.kill()
        script.wait()
    deadline = time.monotonic() + wait_s
    while (processes_with(marker) or folder.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    left, temp_left = processes_with(marker), folder.exists()
    end_processes(left)
    if temp_left:
        shutil.rmtree(folder, ignore_errors=True)
    exit_code = None if script.returncode == -sig else script.returncode
    return SignalledCluster(True, exit_code, private, (home / ".ray").exists(), len(left), temp_left,
                            log.read_text()[-3000:])

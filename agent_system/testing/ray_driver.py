"""A Ray driver killed with SIGKILL, and what it leaves running: the attack behind recipe/forge/engines/verl/reaper.py
(tests/verl_engine/test_driver_reaper.py and scripts/reliability_report.py run it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import os, time
import ray
from recipe.forge.engines.verl.reaper import start_reaper

if {reaper}:
    start_reaper()
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote
class Holder:
    def pid(self):
        return os.getpid()

holder = Holder.remote()  # the handle keeps the actor alive
print(ray.get(holder.pid.remote()), flush=True)
time.sleep(600)
"""


@dataclass
class KilledDriver:
    below: list[str]  # the names of the processes below the driver when it was killed (its actor included)
    reapers: int  # how many of them were the watchdog
    left: list[str]  # the names of those still running ``wait_s`` after the kill


def kill_a_ray_driver(reaper: bool = True, wait_s: float = 60.0) -> KilledDriver:
    """Start a driver that runs ``ray.init`` and one actor (with the watchdog first when ``reaper``), SIGKILL it once
    the watchdog has recorded its descendants, and wait up to ``wait_s`` for them to end. Whatever is still
    running afterwards is killed here, so the attack leaves nothing behind itself."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(reaper=reaper)], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, text=True)
    below: list[psutil.Process] = []
    try:
        actor_pid = int(driver.stdout.readline())
        time.sleep(2.5)  # the watchdog records once a second
        below = psutil.Process(driver.pid).children(recursive=True)
        assert actor_pid in {p.pid for p in below}, "the actor is not below the driver"
        described = {p: described_process(p) for p in below}
        below = [p for p, description in described.items() if description is not None]  # some end on their own
        reapers = sum("recipe.forge.engines.verl.reaper" in described[p][1] for p in below)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        return KilledDriver([described[p][0] for p in below], reapers,
                            [described[p][0] for p in still_running(below, wait_s)])
    finally:
        driver.kill()
        for process in below:
            with contextlib.suppress(psutil.Error):
                process.kill()


def described_process(process: psutil.Process) -> tuple[str, str] | None:
    """(name, command line) of ``process``; None once it has ended."""
    try:
        return process.name(), " ".join(process.cmdline())
    except psutil.Error:
        return None


def still_running(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after up to ``timeout_s`` (a zombie has ended: only its parent,
    which may be a container's init, has not collected it yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(process)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)

"""The processes a verl driver starts end with it, even when it is killed with SIGKILL.

``ray.init`` in the driver starts a local Ray cluster (the GCS, the raylet, the dashboard, Ray's worker
processes, and through them the environment workers) as the driver's descendants; a driver that exits cleanly
shuts them down, one killed with SIGKILL leaves them all running. :func:`start_reaper` starts a watchdog,
``python -m recipe.forge.engines.verl.reaper <driver pid>``, in a session of its own (a signal sent to the
driver's process group does not reach it). Once a second it records the driver's descendants, each by pid and
start time (from /proc, so a reused pid is never mistaken for one of them); when the driver is gone it sends
SIGTERM to every recorded process still alive and to their descendants, SIGKILL to those left after
:data:`GRACE_S`, and exits. After a clean exit nothing is left to end.

The one-machine cluster (cpu/local_cluster.py) uses the same watchdog for processes that are not the driver's
descendants (``ray start`` daemonises them): ``--marker NAME=value`` also ends every process whose environment
holds that entry (:func:`processes_with`), and ``--remove DIR`` deletes the cluster's temp folder afterwards.

Linux only (it reads /proc); elsewhere :func:`start_reaper` does nothing and ``ray stop`` ends a local cluster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 1.0
GRACE_S = 3.0

Identity = tuple[int, int]  # (pid, start time in clock ticks since boot)


def process_table(proc: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """Every process visible in ``proc``: pid -> (parent pid, start time)."""
    table = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...; comm may hold spaces
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(table: dict[int, tuple[int, int]], roots: set[int]) -> set[Identity]:
    """The processes of ``table`` below any of ``roots`` (the roots themselves excluded), as identities."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, frontier = set(), list(roots)
    while frontier:
        for child in children.get(frontier.pop(), ()):
            identity = (child, table[child][1])
            if identity not in found:
                found.add(identity)
                frontier.append(child)
    return found


def alive(identities: set[Identity], table: dict[int, tuple[int, int]]) -> set[Identity]:
    """Those of ``identities`` still running (same pid and the same start time)."""
    return {(pid, start) for pid, start in identities if pid in table and table[pid][1] == start}


def end_processes(recorded: set[Identity], grace_s: float = GRACE_S) -> None:
    """SIGTERM to the recorded processes still alive and their descendants; SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        table = process_table()
        living = alive(recorded, table)
        targets = {t for t in living | descendants(table, {pid for pid, _ in living}) if t[0] != os.getpid()}
        if not targets:
            return
        for pid, _ in targets:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        recorded = recorded | targets
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and alive(recorded, process_table()):
            time.sleep(0.1)


def processes_with(marker: str, proc: Path = Path("/proc")) -> set[Identity]:
    """The processes (pid, start time) whose environment holds ``marker`` (``NAME=value``)."""
    needle = marker.encode() + b"\0"
    found = set()
    for pid, (_, start) in process_table(proc).items():
        try:
            environ = (proc / str(pid) / "environ").read_bytes()
        except OSError:  # ended, or not ours
            continue
        if environ.startswith(needle) or b"\0" + needle in environ:
            found.add((pid, start))
    return found


def watch(driver: int, marker: str | None = None, remove: str | None = None) -> None:
    """Record the driver's descendants until it is gone, then end them (and the processes holding ``marker``,
    then delete the folder ``remove``)."""
    table = process_table()
    if driver in table:
        identity, me = (driver, table[driver][1]), (os.getpid(), table[os.getpid()][1])
        recorded: set[Identity] = set()
        while alive({identity}, table) and os.getppid() == driver:
            recorded = (alive(recorded, table) | descendants(table, {driver})) - {me}
            time.sleep(POLL_S)
            table = process_table()
        end_processes(recorded)
    if marker is not None:
        end_processes(processes_with(marker))
    if remove is not None:
        shutil.rmtree(remove, ignore_errors=True)


def start_reaper(marker: str | None = None, remove: str | None = None) -> subprocess.Popen | None:
    """Start the watchdog of this process (see the module's docstring); None where /proc does not exist."""
    if not Path("/proc/self/stat").exists():
        return None
    extra = ([f"--marker={marker}"] if marker else []) + ([f"--remove={remove}"] if remove else [])
    return subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), *extra], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("driver", type=int)
    parser.add_argument("--marker")
    parser.add_argument("--remove")
    args = parser.parse_args()
    watch(args.driver, args.marker, args.remove)

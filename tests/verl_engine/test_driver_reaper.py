"""A verl driver killed with SIGKILL takes the Ray processes it started with it (recipe/forge/engines/verl/reaper.py).

Without the watchdog, a SIGKILLed driver left its local Ray cluster running (39 processes after one verl CPU
run): the real test starts a driver that runs ``ray.init`` and an actor, kills it, and waits for every process
that was below it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from recipe.forge.engines.verl.reaper import alive, descendants

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import os, sys, time
import ray
from recipe.forge.engines.verl.reaper import start_reaper

start_reaper()
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote
class Holder:
    def pid(self):
        return os.getpid()

holder = Holder.remote()
print(ray.get(holder.pid.remote()), flush=True)
time.sleep(600)
"""


def test_descendants_and_alive_on_a_hand_made_table():
    # pid -> (parent, start time): 1 <- 10 <- {11, 12 <- 13}; 20 is someone else's
    table = {1: (0, 1), 10: (1, 100), 11: (10, 101), 12: (10, 102), 13: (12, 103), 20: (1, 104)}
    assert descendants(table, {10}) == {(11, 101), (12, 102), (13, 103)}
    assert descendants(table, {12}) == {(13, 103)} and descendants(table, {99}) == set()
    # pid 12 reused by a later process (another start time) is not the recorded one
    assert alive({(12, 102), (11, 101), (77, 5)}, {**table, 12: (1, 999)}) == {(11, 101)}


@pytest.mark.timeout(240)
def test_a_killed_driver_takes_its_ray_cluster_with_it():
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    below: list[psutil.Process] = []
    try:
        actor_pid = int(driver.stdout.readline())
        time.sleep(2.5)  # the watchdog records once a second
        below = [p for p in psutil.Process(driver.pid).children(recursive=True) if p.pid != actor_pid]
        actor = psutil.Process(actor_pid)
        names = {p.name() for p in below}
        assert {"gcs_server", "raylet"} <= names, names  # ray.init started a local cluster below the driver
        assert sum("recipe.forge.engines.verl.reaper" in " ".join(p.cmdline()) for p in below) == 1
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        left = running(below + [actor], timeout_s=60)
        assert not left, [(p.pid, p.name()) for p in left]
    finally:
        driver.kill()
        for process in below:
            with contextlib.suppress(psutil.Error):
                process.kill()


def running(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
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

"""scripts/bench_envs.py: its JSON line, the group-identity check it reports, and its errors on bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent_system.environments.base import Observations

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_envs.py"
pytestmark = pytest.mark.timeout(300)


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def bench_module(load_script):
    return load_script("bench_envs.py")


@pytest.mark.parametrize("env_name", ["sokoban", "gym_cards/NumberLine-v0"])
def test_json_line_of_an_expert_run(env_name):
    proc = bench("--env", env_name, "--num-envs", "16", "--group-size", "4", "--rounds", "2", "--policy", "expert", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = proc.stdout.strip().splitlines()  # exactly one line
    result = json.loads(line)
    assert result["env"] == env_name and result["num_envs"] == 16 and result["group_size"] == 4
    assert result["steps_per_second"] > 0
    assert result["success_rate"] == 1.0  # the BFS / NumberLine experts always win these
    assert result["groups_identical_at_reset"] is True
    assert 1.0 <= result["mean_episode_length"] <= 15
    assert [s["num_workers"] for s in result["scaling"]] == [0]
    assert result["worker_processes"] == 0  # cheap environments step in-process


def test_scaling_reports_the_worker_processes_that_ran():
    proc = bench("--env", "sokoban", "--num-envs", "8", "--group-size", "4", "--rounds", "1", "--num-workers", "0", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert [(s["num_workers"], s["worker_processes"]) for s in result["scaling"]] == [(0, 0), (2, 2)]
    assert result["scaling"][0]["speedup_vs_first"] == 1.0 and result["scaling"][1]["success_rate"] == 1.0


def test_groups_identical_detects_a_differing_copy(bench_module):
    same = Observations(text=["p"] * 4, anchor=["a", "a", "b", "b"], image=[None] * 4, admissible=[()] * 4)
    assert bench_module.groups_identical(same, 2)
    differing_text = Observations(text=["p"] * 4, anchor=["a", "a", "b", "c"], image=[None] * 4, admissible=[()] * 4)
    assert not bench_module.groups_identical(differing_text, 2)
    img = np.zeros((2, 2, 3), dtype=np.uint8)
    differing_image = Observations(text=["p"] * 2, anchor=["a", "a"], image=[img, img + 1], admissible=[()] * 2)
    assert not bench_module.groups_identical(differing_image, 2)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "webshop", "--mode", "rgb_array"], "--mode applies to sokoban and gym_cards"),
        (["--num-envs", "10", "--group-size", "4"], "multiple of --group-size"),
        (["--num-envs", "0"], "must be >= 1"),
        (["--env", "no_such_env"], "invalid choice"),
    ],
)
def test_bad_flags_fail_with_a_message(args, message):
    proc = bench(*args, "--rounds", "1", "--json")
    assert proc.returncode != 0
    assert message in proc.stderr

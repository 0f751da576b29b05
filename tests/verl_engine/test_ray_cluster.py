"""The distributed engine on a real two-node Ray cluster on this machine, and a rollout server killed mid-run.

The cluster is what docs/gpu_cluster.md tells a multi-node user to start (``ray start --head``, then
``ray start --address=HEAD:PORT``; recipe/forge/engines/verl/cpu/local_cluster.py, the commands the doc shows),
each node with one logical GPU, and the run is the user's entry point (scripts/verl_cpu_smoke.py) with
``trainer.nnodes=2 trainer.n_gpus_per_node=1`` joining it through ``RAY_ADDRESS``:

* the run trains, with one FSDP rank on each node (Ray's state API says where each actor ran) and a rollout server
  per rank on its rank's node; a checkpoint after each iteration;
* once iteration 1 is logged, the second rollout server is killed from outside (SIGKILL to the pid Ray's state
  API gives for ``slea_rl_hf_server_1``): the run ends in iteration 2 with one line naming the server, its pid and
  the iteration, checkpoint 1 whole (actor shards, library) and no checkpoint 2 begun;
* a resume (``trainer.resume_mode=auto``) continues from checkpoint 1 and finishes iteration 2 on both nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOKE = [sys.executable, str(REPO / "scripts" / "verl_cpu_smoke.py"), "--json", "--nodes", "2", "--ranks", "1",
         "--iterations", "2", "--save-freq", "1"]


@pytest.fixture(scope="module")
def cluster():
    from recipe.forge.engines.verl.cpu.local_cluster import LocalCluster

    with LocalCluster(nodes=2, num_cpus=14, num_gpus=1, env={"PYTHONPATH": str(REPO)}) as running:
        yield running


def metrics_lines(out: Path) -> int:
    path = out / "run" / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(condition, process: subprocess.Popen, what: str, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.05)


def test_two_nodes_train_a_killed_rollout_server_ends_the_run_clearly_and_a_resume_finishes(cluster, tmp_path):
    env = {**cluster.env, **cluster.client_env()}
    assert sorted(cluster.node_names().values()) == ["node0", "node1"]
    run = subprocess.Popen([*SMOKE, "--out", str(tmp_path)], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: metrics_lines(tmp_path) >= 1, run, "iteration 1")
        [server] = cluster.ray_list("actors", "name=slea_rl_hf_server_1", "state=ALIVE")
        os.kill(int(server["pid"]), signal.SIGKILL)  # the server's process, from outside the run
        _, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0 and "the run failed (exit 3)" in stderr, stderr[-3000:]
    assert (f"worker died: rollout server slea_rl_hf_server_1 (HFRolloutServer, pid {server['pid']}, node "
            in stderr and "died during iteration 2" in stderr), stderr[-3000:]

    # iteration 1 ran on both nodes: an FSDP rank (verl's WorkerDict) on each, and each rank's rollout server on
    # its rank's node (the weight sync stays on the node)
    where = cluster.placement()
    assert where.get("WorkerDict") == ["node0", "node1"] and where.get("HFRolloutServer") == ["node0", "node1"], where
    assert metrics_lines(tmp_path) == 1

    # nothing of iteration 2 was written; checkpoint 1 is whole and its library parses
    checkpoints = tmp_path / "run"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert not (checkpoints / "global_step_2").exists()
    actor = checkpoints / "global_step_1" / "actor"
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in actor.glob("model_world_size_2_rank_*.pt")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    library = json.loads((checkpoints / "global_step_1" / "forge_library" / "experience_library.json").read_text())
    assert library["payload"]["library"]["entries"] is not None
    for saved in (tmp_path / "library").rglob("*.json"):
        json.loads(saved.read_text())  # every library file the run wrote is whole

    resumed = subprocess.run([*SMOKE, "--out", str(tmp_path), "--resume"], cwd=REPO, env=env, text=True,
                             capture_output=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["steps"] == [1, 2] and summary["first_step"] == 1
    assert (summary["world_size"], summary["replicas"], summary["nodes"]) == (2, 2, 2)
    assert summary["rollout_servers_seen"][-1] == 2 and summary["grad_norm"] > 0
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


def test_the_gpu_cluster_page_shows_the_commands_the_cluster_runs():
    """docs/gpu_cluster.md's CPU rehearsal block is what scripts/verl_cpu_cluster.py --print-commands prints."""
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "verl_cpu_cluster.py"), "--print-commands"],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout.strip().splitlines()
    doc = (REPO / "docs" / "gpu_cluster.md").read_text()
    assert all(f"\n{command}\n" in doc for command in printed) and len(printed) == 2, printed

"""The distributed engine trains end to end on the CPU: verl's own TaskRunner, trainer, FSDP2 actor (and reference)
workers, agent-loop workers and the hf rollout server, through ``python -m recipe.forge.main_forge`` as a user runs
it (scripts/verl_cpu_smoke.py), with a tiny Llama on NumberLine, the library's gates open from iteration 1.

* forge on a real two-node Ray cluster on this machine (``ray start --head`` and ``ray start --address``, as
  docs/gpu_cluster.md tells a multi-node user; ``trainer.nnodes=2 trainer.n_gpus_per_node=1`` joining it through
  ``RAY_ADDRESS``) with two agent-loop workers, self-distillation, the KL loss (reference worker) and verl's rollout
  correction (token IS weights): two FSDP2 ranks on gloo, one per node (the checkpoint's per-rank files each hold
  half of every parameter), two hf rollout replicas, each on its rank's node and synced after each update, the G
  copies of each task in one worker and one library version per iteration; a checkpoint at iteration 2, exported by
  ``slea-rl export`` (verl's model merger joins the shards) to a plain Hugging Face model with the actor's weights
  and greedy tokens. During iteration 3 the second rollout server is killed from outside (SIGKILL): the run ends
  with one line naming it and the iteration, checkpoint 2 whole and nothing of iteration 3 written; a resume from
  the sharded state continues at iteration 3 with the library, the actor, its optimizer and the task sampler
  restored, and validates (tests/verl_engine/test_data_parallel.py checks that world size 2 computes world size
  1's update);
* grpo (verl's own advantage step on the rebuilt scores), 2 iterations: a gradient in every iteration whose
  advantages are not all zero, and none in an iteration whose groups all tied.

gigpo runs the trainer's step-level path that forge runs, with anchor observations instead of clusters as group
keys (tests/verl_engine/test_step_batch.py checks its advantages and groups on a hand-worked batch); it has no
end-to-end run of its own here, for the suite's time.
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


SMOKE = [sys.executable, str(REPO / "scripts" / "verl_cpu_smoke.py"), "--json"]


def smoke(out: Path, *args: str, env: dict | None = None) -> dict:
    result = subprocess.run([*SMOKE, "--out", str(out), *args], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


ROLLOUT_IS = "algorithm.rollout_correction.rollout_is=token"


@pytest.fixture(scope="module")
def two_nodes():
    """A Ray cluster of two nodes on this machine, one logical GPU each, brought up as docs/gpu_cluster.md tells a
    multi-node user (``ray start --head``, ``ray start --address=...``; cpu/local_cluster.py)."""
    from recipe.forge.engines.verl.cpu.local_cluster import LocalCluster

    with LocalCluster(nodes=2, num_cpus=14, num_gpus=1, env={"PYTHONPATH": str(REPO)}) as running:
        yield running


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> tuple[str, str]:
    """The smoke script's tiny Llama, built once for every run of this module: ``--model <folder>``."""
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return ("--model", save_tiny_model_dir(tmp_path_factory.mktemp("tiny_llama")))


def logged_keys(run: Path) -> set[str]:
    """Every metric name the run's metrics.jsonl holds (the console shows a few; verl's all went there)."""
    return {key for line in (run / "metrics.jsonl").read_text().splitlines() for key in json.loads(line)}


def metrics_lines(out: Path) -> int:
    path = out / "run" / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(lines: int, out: Path, process: subprocess.Popen, timeout_s: float = 600.0) -> None:
    """Until the run at ``out`` has logged ``lines`` iterations (it must still be running meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while metrics_lines(out) < lines:
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before iteration {lines}"
        assert time.monotonic() < deadline, f"no iteration {lines} after {timeout_s:.0f} s"
        time.sleep(0.02)


def killed_in_iteration_3(cluster, out: Path, args: tuple[str, ...]) -> tuple[str, int]:
    """Run the smoke script with ``args`` (3 iterations) on ``cluster``; once iteration 2 is logged, SIGKILL the second rollout server's process
    (its pid from Ray's state API), from outside the run. Returns the run's stderr and the killed pid."""
    env = cluster.client_env()
    run = subprocess.Popen([*SMOKE, "--out", str(out), *args], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(1, out, run)
        [server] = cluster.ray_list("actors", "name=slea_rl_hf_server_1", "state=ALIVE")
        wait_for(2, out, run)
        os.kill(int(server["pid"]), signal.SIGKILL)
        _, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0 and "the run failed (exit 3)" in stderr, stderr
    return stderr, int(server["pid"])


def test_forge_on_two_nodes_with_distillation_kl_and_rollout_correction_survives_a_killed_server(
        two_nodes, tmp_path, load_script, tiny_llama):
    run = (*tiny_llama, "--nodes", "2", "--ranks", "1", "--agent-workers", "2", "--distill", "--kl",
           "--save-freq", "2", "--group-size", "4")  # 4 copies: groups rarely all tie
    stderr, pid = killed_in_iteration_3(two_nodes, tmp_path, (*run, "--iterations", "3", ROLLOUT_IS))
    # the run ends with one line naming the dead process and the iteration
    assert (f"worker died: rollout server slea_rl_hf_server_1 (HFRolloutServer, pid {pid}, node " in stderr
            and "died during iteration 3" in stderr), stderr  # the smoke script's report: the run's own last lines
    # one FSDP rank (verl's WorkerDict) on each node, each rank's rollout server on its rank's node
    where = two_nodes.placement()
    assert where.get("WorkerDict") == ["node0", "node1"] and where.get("HFRolloutServer") == ["node0", "node1"], where

    # the two iterations it completed
    smoke_script = load_script("verl_cpu_smoke.py")
    first = smoke_script.summarise(smoke_script.read_metrics(tmp_path / "run" / "metrics.jsonl"), "forge", 0.0)
    layout = {key: first[key] for key in ("world_size", "replicas", "agent_workers", "nodes")}
    assert layout == {"world_size": 2, "replicas": 2, "agent_workers": 2, "nodes": 2}, first
    assert first["iterations"] == 2 and first["first_step"] == 1
    assert first["grad_norm"] > 0 and first["kl_loss"] is not None
    assert first["experiences_per_step"] > 0 and first["distill_rows"] > 0
    # after each weight sync both replicas serve the actor's policy: every row's log-probs agree with the actor's
    assert first["rollout_servers_seen"] == [2, 2]
    assert all(gap < 0.01 for gap in first["rollout_actor_logprob_diff_maxes"]), first
    # verl ran the 2 tasks in the 2 workers, the G copies of each in one of them, from one library version
    assert first["agent_workers_seen"] == [2, 2] and first["task_groups_split"] == [0, 0]
    assert first["library_versions_seen"] == [1, 1]
    assert any(key.startswith("rollout_corr/") for key in logged_keys(tmp_path / "run"))  # verl's correction ran for forge's step

    # checkpoint 2 is whole (two shards, the library, the task sampler) and nothing of iteration 3 was written
    checkpoints = tmp_path / "run"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert not (checkpoints / "global_step_3").exists()
    checkpoint = checkpoints / "global_step_2"
    assert (checkpoint / "actor").is_dir() and (checkpoint / "data.pt").exists()
    library = json.loads((checkpoint / "forge_library" / "experience_library.json").read_text())
    assert library["payload"]["library"]["entries"]
    for saved in (tmp_path / "library").rglob("*.json"):
        json.loads(saved.read_text())  # every library file the run wrote is whole
    check_sharded_checkpoint(checkpoint / "actor", world_size=2)
    check_export(checkpoint, tmp_path / "export", world_size=2)

    env = two_nodes.client_env()
    resumed = smoke(tmp_path, *run, "--resume", "--iterations", "3", ROLLOUT_IS, "trainer.test_freq=3",
                    "actor_rollout_ref.rollout.val_kwargs.n=2", env=env)
    # metrics.jsonl keeps the first run's iterations (verl's own file logger would have emptied it) and adds 3
    assert resumed["steps"] == [1, 2, 3] and resumed["grad_norms"][:2] == first["grad_norms"]
    assert resumed["library_size"] >= first["library_size"] > 0  # the library came back, it did not start empty
    assert resumed["grad_norm"] > 0 and resumed["rollout_actor_logprob_diff_max"] < 0.01
    assert (resumed["world_size"], resumed["nodes"]) == (2, 2)
    # the embedded engine's validation rule: the 2 held-out tasks x val_kwargs.n (2 here; its default, env.rollout.n,
    # is checked by test_agent_loop_manager) copies, with the library and then without it
    validation = resumed["validation"]
    assert validation["val/num_trajectories"] == validation["val_no_library/num_trajectories"] == 2 * 2
    assert 0.0 <= validation["val/success_rate"] <= 1.0 and 0.0 <= validation["val_no_library/success_rate"] <= 1.0
    assert "val/forge/lessons_checkable" in validation and "val_no_library/forge/lessons_checkable" not in validation


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_forge_in_verls_async_modes_records_versions_and_resumes_where_it_stopped(two_nodes, tmp_path, mode,
                                                                                         tiny_llama):
    """verl's async trainer modes on the two-node cluster the test above runs on (colocate_async: trainer and hf
    server on one logical GPU, partial rollouts; separate_async: a standalone hf server on the other node's GPU,
    its weights through the object store, two local updates per sync), forge with the library from iteration 1,
    verl's staleness bound 2: iteration 1 and its checkpoint, then a resume that trains iteration 2 from the groups
    verl kept in flight."""
    env = two_nodes.client_env()
    run = (*tiny_llama, "--async", mode, "--save-freq", "1", "trainer.v1.sampler.max_off_policy_threshold=2")
    first = smoke(tmp_path, *run, "--iterations", "1", env=env)
    assert first["async_mode"] == mode and first["steps"] == [1] and first["grad_norms"][0] > 0
    # iteration 1 trains rollouts of the initial weights: verl's rollout correction sees the same policy (in
    # separate_async the second mini-batch's old log-probs come from the weights the sync started with)
    assert first["staleness_max"] == 0 and first["rollout_actor_logprob_diff_maxes"][0] < 0.01
    assert first["library_versions"] == [[0]] and first["stale_steps_dropped"] == [0]
    assert any(key.startswith("rollout_corr/") for key in logged_keys(tmp_path / "run"))  # on by default in an async mode
    checkpoint = tmp_path / "run" / "global_step_1"
    assert (checkpoint / "transfer_queue").is_dir()  # verl keeps the groups in flight for the resume
    ledger = json.loads((checkpoint / "forge_library" / "evolution_ledger.json").read_text())
    assert set(ledger["evolved"].values()) == {0} and len(ledger["evolved"]) == 2 * 2  # 2 tasks x 2 copies, once
    resumed = smoke(tmp_path, *run, "--resume", "--iterations", "2", env=env)
    assert resumed["steps"] == [1, 2] and resumed["grad_norms"][0] == first["grad_norms"][0]
    assert resumed["library_size"] >= first["library_size"] > 0 and resumed["grad_norms"][1] > 0
    # every trained step recorded the policy and library versions it was generated with, within verl's bound:
    # iteration 2 trains groups kept from before the checkpoint (policy and library 0) or generated after the
    # resume (the restored weights and library, version 1)
    assert resumed["staleness_max"] in (0, 1) and resumed["library_versions"][1] in ([0], [1], [0, 1])
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["forge/repeated_trajectories"] for m in metrics] == [0, 0]  # nothing evolved the library twice


def test_the_gpu_cluster_page_shows_the_commands_the_cluster_runs():
    """docs/gpu_cluster.md's CPU rehearsal block is what scripts/verl_cpu_cluster.py --print-commands prints."""
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "verl_cpu_cluster.py"), "--print-commands"],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout.strip().splitlines()
    doc = (REPO / "docs" / "gpu_cluster.md").read_text()
    assert all(f"\n{command}\n" in doc for command in printed) and len(printed) == 2, printed


def check_export(checkpoint: Path, out: Path, world_size: int) -> None:
    """``slea-rl export`` of a verl checkpoint of ``world_size`` ranks: the folder loads with plain transformers, its
    weights are the FSDP shards' (each parameter the ranks' dim-0 pieces joined) in bf16 (verl's merger writes bf16),
    and it generates the greedy tokens of the actor's fp32 weights loaded into the model verl saved in
    ``actor/huggingface``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from agent_system.testing.greedy import greedy_tokens
    from recipe.forge.commands.export import main as export

    assert export([str(checkpoint), "--out", str(out)]) == 0
    actor = checkpoint / "actor"
    shards = [torch.load(actor / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu",
                         weights_only=False) for rank in range(world_size)]
    weights = {name: torch.cat([shard[name].to_local() for shard in shards]) for name in shards[0]}
    exported = AutoModelForCausalLM.from_pretrained(out)
    state = exported.state_dict()
    assert set(state) == set(weights) and all(torch.equal(state[k], v.bfloat16()) for k, v in weights.items())
    actor_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(actor / "huggingface"),
                                                   dtype=torch.float32)
    actor_model.load_state_dict(weights, strict=True)
    tokenizer = AutoTokenizer.from_pretrained(actor / "huggingface")
    assert greedy_tokens(exported, AutoTokenizer.from_pretrained(out)) == greedy_tokens(actor_model, tokenizer)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["engine"], manifest["iteration"], manifest["policy"]["dtype"]) == ("verl", 2, "bfloat16")
    assert manifest["config"]["trainer"]["engine"] == "verl" and manifest["packages"]["verl"] == "0.9.1"
    library = json.loads((checkpoint / "forge_library" / "experience_library.json").read_text())["payload"]
    assert manifest["library"]["entries"] == len(library["library"]["entries"]) > 0


def check_sharded_checkpoint(actor: Path, world_size: int) -> None:
    """verl's FSDP2 checkpoint of ``world_size`` ranks: one file per rank, each parameter a DTensor sharded on dim
    0 whose local pieces, one per rank, together make the whole tensor."""
    import torch
    from torch.distributed.tensor import Shard

    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == world_size
    shards = [torch.load(actor / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu",
                         weights_only=False) for rank in range(world_size)]
    assert all(set(shard) == set(shards[0]) for shard in shards)
    for name, tensor in shards[0].items():
        assert tuple(tensor.placements) == (Shard(0),), name
        pieces = [shard[name].to_local() for shard in shards]
        assert sum(piece.shape[0] for piece in pieces) == tensor.shape[0], name
        assert all(piece.shape[0] < tensor.shape[0] for piece in pieces), name  # no rank holds the whole


def test_grpo_trains_two_iterations_and_its_console_reads_like_the_embedded_engines(tmp_path, tiny_llama):
    # Sampling is not seeded, so a group of copies can tie: 4 copies of 2 tasks over 2 iterations make an
    # iteration with some non-zero advantage near certain, and each iteration is checked against its own advantages.
    summary = smoke(tmp_path, *tiny_llama, "--estimator", "grpo", "--group-size", "4",
                    "trainer.logger=[console,jsonl,tensorboard]", "trainer.test_freq=2")
    check_console(Path(summary["log"]), tmp_path / "run", iterations=2)
    assert "val/success_rate" in summary["validation"]  # the last iteration validated: verl's trainer dumps that
    assert summary["iterations"] == 2
    assert any(advantage > 0 for advantage in summary["advantage_abs_max"])
    for advantage, grad_norm in zip(summary["advantage_abs_max"], summary["grad_norms"]):
        assert (grad_norm > 0) == (advantage > 0), summary  # a gradient exactly where some advantage is non-zero
    assert summary["rollout_actor_logprob_diff_max"] is None or summary["rollout_actor_logprob_diff_max"] < 0.01


def check_console(log: Path, run: Path, iterations: int) -> None:
    """What a verl run printed (stdout and stderr): a start banner, one short line per iteration, an end line, no
    traceback, no config dump (verl_config.yaml in the run folder holds it) and no validation metrics dump, verl's
    per-episode note once; the full metrics in metrics.jsonl, TensorBoard's events in the run folder."""
    lines = log.read_text(errors="replace").splitlines()
    assert "Traceback" not in "\n".join(lines) and len(lines) <= 40 + 10 * iterations, "\n".join(lines)
    assert lines[0].startswith("[slea-rl] starting fresh") and lines[-1].startswith("[slea-rl] done in"), lines
    for iteration in range(1, iterations + 1):
        [shown] = [line for line in lines if line.startswith(f"[iter {iteration}] ")]
        assert "success_rate=" in shown and len(shown) < 300, shown
    assert sum("Continuous Token builder" in line for line in lines) <= 1
    assert "actor_rollout_ref" in (run / "verl_config.yaml").read_text()
    assert not any("'actor_rollout_ref'" in line for line in lines)
    assert not any("validation metrics:" in line for line in lines)
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))


"""The distributed engine trains end to end on the CPU: verl's own TaskRunner, trainer, FSDP2 actor (and reference)
workers, agent-loop workers and the hf rollout server, through ``python -m recipe.forge.main_forge`` as a user runs
it (scripts/verl_cpu_smoke.py), with a tiny Llama on NumberLine, the library's gates open from iteration 1.

* forge at world size 2 with two agent-loop workers, with self-distillation, the KL loss (reference worker) and
  verl's rollout correction (token IS weights): two FSDP2 ranks on gloo (the checkpoint's per-rank files each hold
  half of every parameter), two hf rollout replicas both synced after each update, the G copies of each task in one
  worker and one library version per iteration; a checkpoint at iteration 2, exported by ``slea-rl export`` (verl's
  model merger joins the shards) to a plain Hugging Face model with the actor's weights and greedy tokens, then a
  resume from the sharded state that continues at iteration 3 with the library, the actor, its optimizer and the
  task sampler restored, and validates (tests/verl_engine/test_data_parallel.py checks that world size 2 computes
  world size 1's update);
* grpo (verl's own advantage step on the rebuilt scores), 2 iterations: a gradient in every iteration whose
  advantages are not all zero, and none in an iteration whose groups all tied.

gigpo runs the trainer's step-level path that forge runs, with anchor observations instead of clusters as group
keys (tests/verl_engine/test_step_batch.py checks its advantages and groups on a hand-worked batch); it has no
end-to-end run of its own here, for the suite's time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def smoke(out: Path, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "verl_cpu_smoke.py"), "--json", "--out", str(out), *args],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


ROLLOUT_IS = "algorithm.rollout_correction.rollout_is=token"


def test_forge_at_world_size_two_with_distillation_kl_and_rollout_correction_saves_and_resumes(tmp_path):
    run = ("--ranks", "2", "--agent-workers", "2", "--distill", "--kl", "--save-freq", "2",
           "--group-size", "4")  # 4 copies: groups rarely all tie
    first = smoke(tmp_path, *run, ROLLOUT_IS)
    layout = {key: first[key] for key in ("world_size", "replicas", "agent_workers", "nodes")}
    assert layout == {"world_size": 2, "replicas": 2, "agent_workers": 2, "nodes": 1}, first
    assert first["iterations"] == 2 and first["first_step"] == 1
    assert first["grad_norm"] > 0 and first["kl_loss"] is not None
    assert first["experiences_per_step"] > 0 and first["distill_rows"] > 0
    # after each weight sync both replicas serve the actor's policy: every row's log-probs agree with the actor's
    assert first["rollout_servers_seen"] == [2, 2]
    assert all(gap < 0.01 for gap in first["rollout_actor_logprob_diff_maxes"]), first
    # verl ran the 2 tasks in the 2 workers, the G copies of each in one of them, from one library version
    assert first["agent_workers_seen"] == [2, 2] and first["task_groups_split"] == [0, 0]
    assert first["library_versions_seen"] == [1, 1]
    assert "rollout_corr/" in Path(first["log"]).read_text(errors="replace")  # verl's correction ran for forge's step
    checkpoint = tmp_path / "run" / "global_step_2"
    assert (checkpoint / "actor").is_dir() and (checkpoint / "forge_library").exists()
    assert (checkpoint / "data.pt").exists()  # verl's dataloader state: the task sampler
    check_sharded_checkpoint(checkpoint / "actor", world_size=2)
    check_export(checkpoint, tmp_path / "export", world_size=2)

    resumed = smoke(tmp_path, *run, "--resume", "--iterations", "3", ROLLOUT_IS, "trainer.test_freq=3",
                    "actor_rollout_ref.rollout.val_kwargs.n=2")
    # metrics.jsonl keeps the first run's iterations (verl's own file logger would have emptied it) and adds 3
    assert resumed["steps"] == [1, 2, 3] and resumed["grad_norms"][:2] == first["grad_norms"]
    assert resumed["library_size"] >= first["library_size"] > 0  # the library came back, it did not start empty
    assert resumed["grad_norm"] > 0 and resumed["rollout_actor_logprob_diff_max"] < 0.01
    assert resumed["world_size"] == 2
    # the embedded engine's validation rule: the 2 held-out tasks x val_kwargs.n (2 here; its default, env.rollout.n,
    # is checked by test_agent_loop_manager) copies, with the library and then without it
    validation = resumed["validation"]
    assert validation["val/num_trajectories"] == validation["val_no_library/num_trajectories"] == 2 * 2
    assert 0.0 <= validation["val/success_rate"] <= 1.0 and 0.0 <= validation["val_no_library/success_rate"] <= 1.0
    assert "val/forge/lessons_checkable" in validation and "val_no_library/forge/lessons_checkable" not in validation


def check_export(checkpoint: Path, out: Path, world_size: int) -> None:
    """``slea-rl export`` of a verl checkpoint of ``world_size`` ranks: the folder loads with plain transformers, its
    weights are the FSDP shards' (each parameter the ranks' dim-0 pieces joined) in bf16 (verl's merger writes bf16),
    and it generates the greedy tokens of the actor's fp32 weights loaded into the model verl saved in
    ``actor/huggingface``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from agent_system.testing.greedy import greedy_tokens
    from recipe.forge.export import main as export

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


def test_grpo_trains_two_iterations(tmp_path):
    # Sampling is not seeded, so a group of copies can tie: 4 copies of 2 tasks over 2 iterations make an
    # iteration with some non-zero advantage near certain, and each iteration is checked against its own advantages.
    summary = smoke(tmp_path, "--estimator", "grpo", "--group-size", "4")
    assert summary["iterations"] == 2
    assert any(advantage > 0 for advantage in summary["advantage_abs_max"])
    for advantage, grad_norm in zip(summary["advantage_abs_max"], summary["grad_norms"]):
        assert (grad_norm > 0) == (advantage > 0), summary  # a gradient exactly where some advantage is non-zero
    assert summary["rollout_actor_logprob_diff_max"] is None or summary["rollout_actor_logprob_diff_max"] < 0.01

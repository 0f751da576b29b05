"""SLEA-RL's own share of an iteration: clustering + retrieval, advantage and library evolution together,
as a fraction of the wall-clock of all phases (rollout, preparation, update, SLEA-RL), from a short local
run with a tiny random model (the smallest possible model cost, so the share is an upper bound for real ones).

    python scripts/bench_overhead.py --json      # one JSON line with forge_share_of_iteration (goal <= 0.02)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config")


def run(iterations: int, tasks: int, group: int, env_name: str, max_steps: int, max_new_tokens: int) -> dict:
    from hydra import compose, initialize_config_dir

    from recipe.forge.engines.local.timing import FORGE_PHASES
    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.main_forge import validate

    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as out:  # the run folder goes with the figures
        overrides = [
            f"env.env_name={env_name}", f"env.max_steps={max_steps}", f"env.rollout.n={group}",
            f"data.train_batch_size={tasks}", "data.val_batch_size=1", "algorithm.adv_estimator=forge",
            f"trainer.total_training_steps={iterations}", "trainer.test_freq=-1", "trainer.save_freq=-1",
            f"actor_rollout_ref.rollout.response_length={max_new_tokens}", "trainer.local.progress=false",
            "trainer.local.compute_dtype=fp32", "trainer.local.response_prefix=", "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}", f"algorithm.forge.checkpoint_dir={out}/library",
            "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
            # no reference pass: the cheapest iteration, so SLEA-RL's share is an upper bound
            "actor_rollout_ref.actor.use_kl_loss=false",
        ]
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            cfg = compose(config_name="forge_trainer", overrides=overrides)
        trainer = LocalTrainer(validate(cfg), Components(policy=script_policy("tiny", tiny=True)))
        started = time.perf_counter()
        history = trainer.fit()
        wall = time.perf_counter() - started
    keys = (*FORGE_PHASES, "gen", "prepare", "update_actor")
    phases = {k: float(np.sum([h.get(f"timing_s/{k}", 0.0) for h in history])) for k in keys}
    total = sum(phases.values())
    forge = sum(phases[k] for k in FORGE_PHASES)
    return {
        "forge_share_of_iteration": forge / total if total else 0.0,
        "iterations": iterations,
        "tasks_x_group": f"{tasks}x{group}",
        "env": env_name,
        "step_samples_per_iteration": float(np.mean([h["batch/num_samples"] for h in history])),
        "library_size_final": history[-1].get("forge/library_total_size", 0.0),
        "clusters_final": history[-1].get("forge/cluster_count", 0.0),
        "phase_seconds": {k: round(v, 4) for k, v in phases.items()},
        "wall_s": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--env", default="sokoban")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    result = run(args.iterations, args.tasks, args.group, args.env, args.max_steps, args.max_new_tokens)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=1, sort_keys=True))
        print(f"SLEA-RL share of the iteration: {100 * result['forge_share_of_iteration']:.2f}% (goal <= 2%)")


if __name__ == "__main__":
    main()

"""Rollout throughput of the embedded engine, and the wall-clock of G=8 copies per task against G=1.

verl-agent's GiGPO work claims that G trajectories cost about as much wall-clock as one (batched generation on a GPU is
memory-bound, so more rows are nearly free). This script measures it for the same B tasks on whatever device
it runs on: a CPU is compute-bound, so expect a ratio far above 1 there.

    python scripts/bench_rollout.py                       # SmolLM2-135M-Instruct, CPU or GPU
    python scripts/bench_rollout.py --tiny --json         # a tiny random model (plumbing cost only)
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def measure(model_path: str, tiny: bool, tasks: int, groups: list[int], env_name: str, max_steps: int,
            max_new_tokens: int, device: str, dtype: str) -> dict:
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.hf.compute import resolve_device

    policy = script_policy(model_path, tiny)
    tokenizer = policy.tokenizer
    dev = resolve_device(device)
    policy.model.to(dev)
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if dtype == "bf16" else None
    kwargs = {"autocast": autocast} if autocast else {}
    results = {}
    seeds = list(range(tasks))
    for g in groups:
        cfg = {"env": {"env_name": env_name, "max_steps": max_steps, "rollout": {"n": g}},
               "data": {"train_batch_size": tasks, "val_batch_size": 1}}
        envs, _ = make_envs(cfg)
        generator = HFGenerator(policy.model, tokenizer, batch_size=tasks * g,
                                generator=torch.Generator().manual_seed(0), **kwargs)
        sampling = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
        started = time.perf_counter()
        batch = TrajectoryCollector().collect(envs, generator, sampling, seeds=seeds)
        wall = time.perf_counter() - started
        envs.close()
        results[g] = {"wall_s": wall, "tokens": generator.tokens_generated, "tokens_per_s": generator.tokens_generated / wall,
                      "steps": len(batch.steps)}
    g_lo, g_hi = min(groups), max(groups)
    return {
        "model": "tiny-random-llama" if tiny else model_path,
        "device": str(dev),
        "tasks": tasks,
        "by_group": {str(g): {k: round(v, 3) for k, v in r.items()} for g, r in results.items()},
        f"wall_ratio_G{g_hi}_over_G{g_lo}": results[g_hi]["wall_s"] / results[g_lo]["wall_s"],
        "rollout_tokens_per_s": results[g_hi]["tokens_per_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--env", default="gym_cards/NumberLine-v0")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.model, args.tiny, args.tasks, sorted(args.groups), args.env, args.max_steps,
                     args.max_new_tokens, args.device, args.dtype)
    print(json.dumps(result, sort_keys=True) if args.json else json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()

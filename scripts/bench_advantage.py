"""Benchmark of the forge / gigpo advantage computation against a per-sample Python loop reference.

Batches mimic ALFWorld: task groups of G=8 trajectories of up to 50 steps (400 step samples a group), whose
anchors are room observations drawn from a per-task pool (so copies revisit the same states, as real groups do).
Times the full gigpo path (episode part, exact anchor step groups, broadcast to (bs, response_len)) and the
plain-loop reference (dicts and Python loops per sample, the definition written out) in the same run.

    python scripts/bench_advantage.py [--sizes 1000 10000 100000 1000000] [--similarity] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict

import numpy as np
import torch

from recipe.forge.core_forge import compute_gigpo_advantage

RECEPTACLES = ["cabinet", "drawer", "countertop", "shelf", "fridge", "microwave", "sinkbasin", "garbagecan", "desk"]
OBJECTS = ["mug", "apple", "knife", "plate", "pencil", "book", "cd", "keychain", "spatula", "tomato", "bowl"]
GROUP_SIZE = 8
STEPS_PER_TRAJECTORY = 50
RESPONSE_LEN = 32


def realistic_batch(n: int, seed: int = 0) -> dict:
    """n step samples in task groups of 8 x 50, with ALFWorld-like anchor observations."""
    rng = np.random.default_rng(seed)
    per_group = GROUP_SIZE * STEPS_PER_TRAJECTORY
    n_groups = max(1, -(-n // per_group))
    pool = []
    for g in range(n_groups):
        states = []
        for s in range(40):
            rec = f"{RECEPTACLES[(g + s) % len(RECEPTACLES)]} {s % 6 + 1}"
            seen = ", ".join(f"a {OBJECTS[(g * 7 + s * 3 + k) % len(OBJECTS)]} {k + 1}" for k in range(1 + s % 4))
            states.append(f"You arrive at {rec}. On the {rec}, you see {seen}. (task {g})")
        pool.append(states)
    sample = np.arange(n)
    group = sample // per_group
    traj = sample // STEPS_PER_TRAJECTORY
    state = rng.integers(0, 40, size=n)
    anchors = np.array([pool[g][s] for g, s in zip(group, state)], dtype=object)
    success = rng.random(n_groups * GROUP_SIZE) < 0.4
    scores = (10.0 * success[traj]).astype(np.float32)
    token_rewards = torch.zeros(n, RESPONSE_LEN)
    token_rewards[:, -1] = torch.from_numpy(scores)
    return {
        "token_level_rewards": token_rewards,
        "response_mask": torch.ones(n, RESPONSE_LEN),
        "step_rewards": rng.normal(size=n),
        "anchor_obs": anchors,
        "index": np.array([f"uid-{g}" for g in group], dtype=object),
        "traj_index": np.array([f"traj-{t}" for t in traj], dtype=object),
    }


def loop_reference(batch: dict, w: float = 1.0) -> list[list[float]]:
    """Per-sample Python loops over dicts: the estimator's definition, as a plain implementation would write it."""
    scores = batch["token_level_rewards"].sum(-1).tolist()
    returns = list(batch["step_rewards"])
    index, anchors = list(batch["index"]), list(batch["anchor_obs"])
    mask = batch["response_mask"].tolist()
    by_uid = defaultdict(list)
    by_step = defaultdict(list)
    for i in range(len(scores)):
        by_uid[index[i]].append(i)
        by_step[(index[i], anchors[i])].append(i)
    advantage = [0.0] * len(scores)
    for members in by_uid.values():
        mean = statistics.fmean(scores[i] for i in members) if len(members) > 1 else 0.0
        for i in members:
            advantage[i] = scores[i] - mean
    for members in by_step.values():
        if len(members) > 1:
            mean = statistics.fmean(returns[i] for i in members)
            for i in members:
                advantage[i] += w * (returns[i] - mean)
    return [[advantage[i] * m for m in mask[i]] for i in range(len(scores))]


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--similarity", action="store_true", help="also time gigpo's similarity step groups")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps timings stable on shared machines)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows = []
    for n in args.sizes:
        batch = realistic_batch(n)
        repeats = 5 if n <= 100_000 else 2
        fast = best_time(lambda: compute_gigpo_advantage(**batch), repeats)
        naive = best_time(lambda: loop_reference(batch), 1)
        check, _ = compute_gigpo_advantage(**batch)
        ref = torch.tensor(loop_reference(batch), dtype=check.dtype) if n <= 10_000 else None
        if ref is not None and not torch.allclose(check, ref, atol=1e-4):
            print(f"mismatch against the loop reference at n={n}", file=sys.stderr)
            return 1
        similar = None
        if args.similarity and n <= 100_000:
            similar = best_time(lambda: compute_gigpo_advantage(**batch, enable_similarity=True), 1)
        rows.append({"n": n, "seconds": fast, "naive_seconds": naive, "similarity_seconds": similar})

    seconds = [r["seconds"] for r in rows]
    ratios = [b / a for a, b, na, nb in zip(seconds, seconds[1:], args.sizes, args.sizes[1:]) if nb == 10 * na]
    growth = max(ratios) if ratios else None
    if args.json:
        print(json.dumps({
            "sizes": args.sizes,
            "seconds": [round(s, 6) for s in seconds],
            "naive_seconds": [round(r["naive_seconds"], 6) for r in rows],
            "speedup": [round(r["naive_seconds"] / r["seconds"], 2) for r in rows],
            "similarity_seconds": [None if r["similarity_seconds"] is None else round(r["similarity_seconds"], 6)
                                   for r in rows],
            "growth_per_10x": None if growth is None else round(growth, 3),
        }))
        return 0
    print(f"{'samples':>10} {'vectorised s':>13} {'loop ref s':>11} {'speedup':>8} {'similarity s':>13}")
    for r in rows:
        sim = "-" if r["similarity_seconds"] is None else f"{r['similarity_seconds']:.4f}"
        print(f"{r['n']:>10} {r['seconds']:>13.4f} {r['naive_seconds']:>11.4f} "
              f"{r['naive_seconds'] / r['seconds']:>7.1f}x {sim:>13}")
    if growth is not None:
        print(f"largest time ratio per 10x samples: {growth:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

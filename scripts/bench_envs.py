"""Environment throughput: steps per second of N parallel environments driven by a scripted policy.

Any registered environment works (agent_system/environments/registry.py): the expert policy is each
environment's own ``expert_action()`` hook (BFS for Sokoban, solvers for Gym Cards, walkthroughs for text
games), the random policy picks admissible actions. Only the manager's ``reset`` / ``step`` are timed
(projection, environment step, memory, prompt building); the policy is not. With several
``--num-workers`` values it also measures scaling against the first value, in the same run
(0 = in-process for cheap environments; >0 = that many worker processes).

    python scripts/bench_envs.py --env sokoban --num-envs 128 --policy expert --json
    python scripts/bench_envs.py --env gym_cards/Points24-v0 --num-envs 128 --num-workers 0 1 2 --json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from tqdm.auto import tqdm

from agent_system.environments.config import env_config_from_mapping
from agent_system.environments.registry import get_env_manager_class, known_env_names
from agent_system.testing.policies import ExpertGenerator, RandomGenerator


def groups_identical(obs, group_n: int) -> bool:
    """True when the copies of every task start from the same anchor observation (and image)."""
    anchors = np.array(obs.anchor, dtype=object).reshape(-1, group_n)
    if not (anchors == anchors[:, :1]).all():
        return False
    for g in range(anchors.shape[0]):
        images = obs.image[g * group_n : (g + 1) * group_n]
        if images[0] is not None and not all(np.array_equal(images[0], im) for im in images[1:]):
            return False
    return True


def mode_section(env_name: str) -> str:
    """The env config section that holds ``mode`` for ``env_name``; only Sokoban and Gym Cards render images."""
    if env_name == "sokoban":
        return "sokoban"
    if env_name.startswith("gym_cards/"):
        return "gym_cards"
    raise SystemExit(f"--mode applies to sokoban and gym_cards/* only, not to --env {env_name}")


def run(args, num_workers: int) -> dict:
    if args.num_envs % args.group_size:
        raise SystemExit(f"--num-envs {args.num_envs} must be a multiple of --group-size {args.group_size}")
    section = {
        "env_name": args.env,
        "seed": args.seed,
        "max_steps": args.max_steps,
        "rollout": {"n": args.group_size},
        "resources_per_worker": {"num_workers": num_workers},
    }
    if args.mode:
        section[mode_section(args.env)] = {"mode": args.mode}
    config = env_config_from_mapping(section)
    config.validate(known_env_names())
    envs = get_env_manager_class(args.env)(config, num_tasks=args.num_envs // args.group_size, split="train")
    policy = ExpertGenerator(envs, seed=args.seed) if args.policy == "expert" else RandomGenerator(envs, seed=args.seed)
    step_time = reset_time = 0.0
    steps = 0
    won, lengths, identical = [], [], []
    for _ in tqdm(range(args.rounds), desc=f"{args.env} workers={num_workers}", disable=args.json):
        t0 = time.perf_counter()
        obs, _ = envs.reset()
        reset_time += time.perf_counter() - t0
        identical.append(groups_identical(obs, args.group_size))
        while envs.active.any():
            idx = np.flatnonzero(envs.active)
            texts = policy.respond([[]] * len(idx))
            actions = [None] * envs.num_envs
            for i, text in zip(idx, texts):
                actions[i] = text
            t0 = time.perf_counter()
            envs.step(actions)
            step_time += time.perf_counter() - t0
            steps += len(idx)
        won.extend(envs.won.tolist())
        lengths.extend(envs.step_count.tolist())
    envs.close()
    return {
        "num_workers": num_workers,
        # what actually ran: heavy environments use worker processes even with --num-workers 0
        "worker_processes": int(getattr(envs.pool, "num_workers", 0)),
        "steps_per_second": steps / step_time,
        "steps_per_second_incl_reset": steps / (step_time + reset_time),
        "reset_seconds": reset_time / args.rounds,
        "success_rate": float(np.mean(won)),
        "mean_episode_length": float(np.mean(lengths)),
        "groups_identical_at_reset": bool(all(identical)),
        "env_steps": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="sokoban", choices=known_env_names())
    parser.add_argument("--num-envs", type=int, default=128, help="environments in parallel (B x G)")
    parser.add_argument("--group-size", type=int, default=8, help="G: copies per task")
    parser.add_argument("--policy", choices=["random", "expert"], default="expert")
    parser.add_argument("--num-workers", type=int, nargs="+", default=[0], help="worker counts to compare; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=5, help="batches of episodes per worker count")
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--mode", choices=["text", "rgb_array"], default=None, help="observation mode (Sokoban, Gym Cards)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    if args.mode:
        mode_section(args.env)  # fail before any environment is built
    if args.num_envs < 1 or args.group_size < 1 or args.rounds < 1 or min(args.num_workers) < 0:
        raise SystemExit("--num-envs, --group-size and --rounds must be >= 1 and --num-workers >= 0")

    results = [run(args, w) for w in args.num_workers]
    base = results[0]
    for r in results:
        r["speedup_vs_first"] = r["steps_per_second"] / base["steps_per_second"]
    summary = {
        "env": args.env,
        "num_envs": args.num_envs,
        "group_size": args.group_size,
        "policy": args.policy,
        "mode": args.mode or "text",
        **{k: base[k] for k in ("num_workers", "worker_processes", "steps_per_second", "steps_per_second_incl_reset", "reset_seconds", "success_rate", "mean_episode_length", "groups_identical_at_reset")},
        "scaling": [{k: r[k] for k in ("num_workers", "worker_processes", "steps_per_second", "speedup_vs_first", "success_rate")} for r in results],
    }
    if args.env == "search":
        from agent_system.environments.env_package.search.throughput import measure_builtin_server

        (server,) = measure_builtin_server([64])
        summary["retrieval_queries_per_second_batch64"] = server["queries_per_second"]
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.env}: {args.num_envs} envs (G={args.group_size}), policy={args.policy}")
    for r in results:
        print(
            f"  workers={r['num_workers']:>2}  {r['steps_per_second']:>10.1f} steps/s  x{r['speedup_vs_first']:.2f}  "
            f"success={r['success_rate']:.3f}  mean length={r['mean_episode_length']:.2f}  reset={r['reset_seconds'] * 1e3:.1f} ms"
        )
    print(f"  groups identical at reset: {summary['groups_identical_at_reset']}")
    if "retrieval_queries_per_second_batch64" in summary:
        print(f"  retrieval server: {summary['retrieval_queries_per_second_batch64']:.1f} queries/s at batch 64")


if __name__ == "__main__":
    main()

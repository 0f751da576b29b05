"""Cost of the verl agent loop's environment episodes with and without manager reuse.

Runs ``--episodes`` episodes through ``EpisodeSession`` (the verl engine's episode driver) on one asyncio loop,
``--concurrency`` at a time, as the agent-loop worker runs them, first with a pool that keeps no manager (a fresh
manager, hence a fresh worker process for heavy environments, per episode: the behaviour before the pool), then
with the process pool's default bound. Every answer is the same fixed action, so only the episode machinery is
timed. Reports managers built, worker processes started and wall seconds per episode for both.

    python scripts/bench_episode_pool.py --env alfworld --episodes 32 --concurrency 8 --json
    python scripts/bench_episode_pool.py --env testing/faulty --episodes 64 --concurrency 16 --json

``testing/faulty`` is agent_system/testing/faulty_env.py's counting environment in worker processes (no data
needed); ``alfworld`` uses the generated games cache (generated on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from agent_system.environments.config import env_config_from_mapping
from agent_system.environments.registry import get_env_manager_class, known_env_names, register_env_manager
from recipe.forge.engines.verl.episode import EpisodeSession
from recipe.forge.engines.verl.manager_pool import ManagerPool, max_idle_from_env

FAULTY = "testing/faulty"
ACTIONS = {"alfworld": "look", FAULTY: "count"}


async def run_episodes(config, args, pool: ManagerPool) -> float:
    """Wall seconds for all episodes, ``args.concurrency`` in flight at a time."""
    answer = f"<think>benchmark</think><action>{ACTIONS.get(args.env, 'up')}</action>"
    gate = asyncio.Semaphore(args.concurrency)

    async def episode(seed: int) -> None:
        async with gate:
            session = EpisodeSession(config, "train", seed, pool=pool)
            try:
                await session.reset()
                while not session.done:
                    await session.step(answer)
            finally:
                await session.close()

    started = time.perf_counter()
    await asyncio.gather(*(episode(seed) for seed in range(args.episodes)))
    return time.perf_counter() - started


def measure(config, args, max_idle: int, heavy: bool) -> dict:
    pool = ManagerPool(max_idle)
    wall = asyncio.run(run_episodes(config, args, pool))
    pool.close()
    return {
        "max_idle": max_idle,
        "managers_built": pool.built,
        "worker_processes_started": pool.built if heavy else 0,  # one worker per single-environment manager
        "seconds_per_episode": wall / args.episodes,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    register_env_manager(FAULTY, "agent_system.testing.faulty_env:FaultyEnvironmentManager")
    parser.add_argument("--env", default=FAULTY, choices=known_env_names())
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16, help="episodes in flight at once (one agent-loop worker)")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    if args.episodes < 1 or args.concurrency < 1 or args.max_steps < 1:
        raise SystemExit("--episodes, --concurrency and --max-steps must be >= 1")
    section = {"env_name": args.env, "max_steps": args.max_steps, "rollout": {"n": 1},
               "resources_per_worker": {"num_workers": 0, "step_timeout_s": 120.0}}
    if args.env.startswith("alfworld"):
        section["alfworld"] = {"num_generated_games": 8}
    config = env_config_from_mapping(section)
    manager_class = get_env_manager_class(args.env)
    manager_class.env_spec(config, "train")  # data preparation (ALFWorld's generated games) stays out of the timing
    heavy = bool(manager_class.heavy)
    fresh = measure(config, args, 0, heavy)
    pooled = measure(config, args, max_idle_from_env(), heavy)
    summary = {"env": args.env, "episodes": args.episodes, "concurrency": args.concurrency,
               "max_steps": args.max_steps, "fresh": fresh, "pooled": pooled,
               "speedup": fresh["seconds_per_episode"] / pooled["seconds_per_episode"]}
    if args.json:
        print(json.dumps(summary))
        return
    for name in ("fresh", "pooled"):
        r = summary[name]
        print(f"{name:>6}: {r['managers_built']} managers, {r['worker_processes_started']} worker processes, "
              f"{r['seconds_per_episode']:.3f} s/episode")
    print(f"speedup {summary['speedup']:.2f}x")


if __name__ == "__main__":
    main()

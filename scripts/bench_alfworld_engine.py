"""ALFWorld engine cost: plain TextWorld + ALFWorld demangler vs our engine (memoised translation and
grammar parses), each in a fresh process over the same generated games, in the same run.

Reports per game: first load + reset, a repeated reset of the same game (the G copies of a task), and the
mean step time along the walkthrough.

    python scripts/bench_alfworld_engine.py --num-games 6 --json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time


class PlainEngine:
    """TextWorld's PDDL environment with ALFWorld's demangler, nothing memoised (the baseline)."""

    def __init__(self):
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        self.env = AlfredDemangler(shuffle=False)(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)))

    def load_and_reset(self, path):
        self.env.load(path)
        return self.env.reset()

    def reset_again(self, path):
        return self.env.reset()

    def step(self, command):
        return self.env.step(command)[0]


class OurEngine:
    def __init__(self):
        from agent_system.environments.env_package.alfworld.engine import AlfredTextGame

        self.game = AlfredTextGame()

    def load_and_reset(self, path):
        return self.game.load_and_reset(path)

    def reset_again(self, path):
        return self.game.load_and_reset(path)  # already loaded: only resets

    def step(self, command):
        return self.game.step(command)


def measure(kind: str, paths: list[str]) -> dict:
    engine = PlainEngine() if kind == "plain" else OurEngine()
    load, again, step_times = [], [], []
    for path in paths:
        with open(path) as f:
            walkthrough = json.load(f)["walkthrough"]
        t0 = time.perf_counter()
        engine.load_and_reset(path)
        load.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.reset_again(path)
        again.append(time.perf_counter() - t0)
        for command in walkthrough:
            t0 = time.perf_counter()
            engine.step(command)
            step_times.append(time.perf_counter() - t0)
    mean = lambda xs: sum(xs) / len(xs)
    return {"load_reset_s": mean(load), "repeat_reset_s": mean(again), "step_ms": 1e3 * mean(step_times)}


def main() -> None:
    from agent_system.environments.env_package.alfworld.game_files import generated_games

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-games", type=int, default=6)
    parser.add_argument("--games-dir", default=os.path.expanduser("~/.cache/slea_rl/alfworld_games"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths = generated_games(args.games_dir, "train", args.num_games, progress=not args.json)
    ctx = mp.get_context("spawn")
    results = {}
    for kind in ("plain", "ours"):
        with ctx.Pool(1) as pool:
            results[kind] = pool.apply(measure, (kind, paths))
    ratios = {k: results["plain"][k] / results["ours"][k] for k in results["plain"]}
    summary = {"num_games": len(paths), "plain": results["plain"], "ours": results["ours"], "speedup": ratios}
    if args.json:
        print(json.dumps(summary))
        return
    for key in ("load_reset_s", "repeat_reset_s", "step_ms"):
        print(f"{key:>15}: plain {results['plain'][key]:.4f}  ours {results['ours'][key]:.4f}  x{ratios[key]:.2f}")


if __name__ == "__main__":
    main()

"""Are the library's state lessons right? Outcome credit against step credit, measured without a model.

A scripted policy plays the environment of a preset (``--preset``, default the main job; ``--override`` adds Hydra
overrides): at each step it answers the environment's expert action with probability ``p``, otherwise a random
admissible action, and with probability ``--invalid`` an answer that does not parse. Each iteration's batch (the
preset's tasks x copies, or ``--tasks``) goes through the library's own evolution steps: partition and selection
(evolution.py), then the rule extractor alone (``lesson_credit: outcome``, the paper's) and the step-credit
extractor around it (``lesson_credit: step``), in the preset's lesson style, with the preset's gamma,
invalid-action penalty, step value and step groups. Every candidate that names an action for a state is checked
against the expert at that state (``lesson_quality.verdict``); per credit mode and level the script reports
right / checked and the precision. No model, no update: seconds per setting, so the mode can be chosen before a
training run.

    python scripts/probe_lesson_credit.py --p 0.3 0.5 0.7 0.9 --json
    python scripts/probe_lesson_credit.py --preset dial_lock_job --p 0.5 --json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config"


def compose(preset: str, overrides: Sequence[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name="forge_trainer", overrides=[f"+experiment={preset}", *overrides])


def tally(candidates) -> dict[str, Counter]:
    """Per level: how many candidates are right, wrong, or name no checkable action."""
    from recipe.forge.experience.lesson_quality import verdict

    out: dict[str, Counter] = {}
    for candidate in candidates:
        out.setdefault(candidate.level, Counter())[verdict(candidate.advice) or "unchecked"] += 1
    return out


def probe(cfg, p: float, invalid: float, iterations: int, seed: int) -> dict:
    """Right / checked per credit mode and level over ``iterations`` batches of the scripted policy."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.testing.policies import NoisyExpert
    from recipe.forge.run_config import load_run_config
    from recipe.forge.experience.extract_credit import step_credit
    from recipe.forge.experience.evolution import partition, select
    from recipe.forge.experience.extract_rule import RuleExtractor

    algorithm = load_run_config(cfg).algorithm
    forge = algorithm.forge
    envs, _ = make_envs(cfg)
    generator = NoisyExpert(envs, p, invalid, seed, exclude_expert=False)
    collector = TrajectoryCollector(progress=False)
    extractors = {"outcome": RuleExtractor(forge.lesson_style),
                  "step": step_credit(RuleExtractor(forge.lesson_style), forge.lesson_style, algorithm.gamma,
                                      algorithm.invalid_action_penalty_coef, forge.step_value, forge.step_groups,
                                      forge.step_state)}
    totals = {mode: {} for mode in extractors}
    successes = 0.0
    try:
        for _ in range(iterations):
            batch = collector.collect(envs, generator, SamplingParams(), dynamic_sampling=False).trajectories
            successes += float(np.mean([t.success for t in batch]))
            wins, losses, eta = partition(batch, forge.success_threshold)
            best, worst = select(wins, losses, forge.top_k_trajectories)
            usable = [t for t in batch if t.failure_reason is None]
            for mode, extractor in extractors.items():
                for level, counts in tally(extractor.extract(best, worst, eta, batch=usable)).items():
                    totals[mode].setdefault(level, Counter()).update(counts)
    finally:
        envs.close()
    report: dict = {"p_expert": p, "invalid": invalid, "success_rate": successes / iterations}
    for mode, levels in totals.items():
        overall = sum(levels.values(), Counter())
        checked = overall["right"] + overall["wrong"]
        report[mode] = {
            "precision": overall["right"] / checked if checked else None, "checked": checked,
            "levels": {level: {"right": c["right"], "wrong": c["wrong"], "unchecked": c["unchecked"]}
                       for level, c in sorted(levels.items())},
        }
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="main_job")
    parser.add_argument("--override", nargs="*", default=[], help="Hydra overrides after the preset")
    parser.add_argument("--p", nargs="+", type=float, default=[0.3, 0.5, 0.7, 0.9], help="P(expert action)")
    parser.add_argument("--invalid", type=float, default=0.1, help="P(an answer that does not parse)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=None, help="tasks per batch (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    overrides = list(args.override) + ([f"data.train_batch_size={args.tasks}"] if args.tasks else [])
    cfg = compose(args.preset, overrides)
    reports = [probe(cfg, p, args.invalid, args.iterations, args.seed) for p in args.p]
    if args.json:
        print(json.dumps({"preset": args.preset, "overrides": overrides, "iterations": args.iterations,
                          "results": reports}))
        return 0
    print(f"{'p(expert)':>9} | {'success':>7} | {'outcome precision':>17} | {'step precision':>14}")
    for r in reports:
        cells = [f"{r[m]['precision']:.3f} ({r[m]['checked']})" if r[m]["precision"] is not None else "-"
                 for m in ("outcome", "step")]
        print(f"{r['p_expert']:>9.2f} | {r['success_rate']:>7.3f} | {cells[0]:>17} | {cells[1]:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

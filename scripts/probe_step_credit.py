"""Does the step part of the advantage credit the action or the clock? Measured without a model.

A scripted learner (agent_system.testing.policies.NoisyExpert) plays each environment that has an expert: at every
step an answer that does not parse with probability ``--invalid``, else the expert's action with probability P,
else another action of the state (another admissible action; Search, which lists none, swaps the expert's search
for an answer and its answer for a search). The steps go through the rollout the engines run (TrajectoryCollector,
with the observation index of the environment's forge settings assigning each step its cluster, the library
empty) and through the step-sample core and estimator they train with (recipe/forge/step_samples.py:
``step_inputs`` and ``samples_advantage`` with zero episode scores, so the advantage is the step part alone), once
per variant of the step part (:data:`VARIANTS`). Per environment and variant, over every state (one anchor
observation of one task group, told apart by the environment's hidden state where it reports one: ALFWorld's
observation does not say what the agent holds; its "Nothing happens." is the state it was said in:
``env.alfworld.nothing_happens_anchor``):

* ``precision``: at the states where the expert's action and another valid action were both taken, the share where
  the expert's action got the higher mean step advantage (ties, equal within 1e-9, are left out and counted apart);
* ``clock_bias``: among the steps that took one action at one state (an invalid answer is one action), the
  correlation between the step advantage and the turn, pooled within those cells (0 is right: the turn says nothing
  about the answer);
* ``format_signal``: at the states where valid and invalid answers were both given, the mean step advantage of the
  valid ones minus that of the invalid ones, averaged over those states (above 0: the step part teaches the format).

``--json`` prints one line: ``{"default": <forge's default variant>, "environments": {<env>: {<variant>:
{"precision", "clock_bias", "format_signal"}}}}`` at the first ``--p`` (0.5 by default), the other P values under
``"by_p"`` and the counts behind each figure under ``"counts"``.

    python scripts/probe_step_credit.py --json > docs/results/probe_step_credit.json
    python scripts/probe_step_credit.py --env numberline sokoban --p 0.5 0.9
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config"
TIE = 1e-9

# environment -> (Hydra overrides, tasks per batch, batches): the presets where one exists, else the base config
ENVIRONMENTS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "numberline": (("+experiment=main_job",), 8, 6),
    "dial_lock": (("+experiment=dial_lock_job",), 8, 6),
    "sokoban": (("env.env_name=sokoban",), 4, 4),
    "alfworld": (("env.env_name=alfworld", "env.alfworld.num_generated_games=8", "env.rollout.n=4",
                  "env.max_steps=20"), 6, 3),
    "webshop": (("env.env_name=webshop",), 4, 4),
    "search": (("env.env_name=search",), 8, 4),
}
PAPER = {"step_value": "return", "step_groups": "cluster", "mode": "mean_norm", "step_state": "observation"}
# variant -> its step-part settings (algorithm.forge), each a change of the paper's
VARIANTS: dict[str, dict[str, str]] = {
    "paper": PAPER,
    "mean_std_norm": {**PAPER, "mode": "mean_std_norm"},  # GiGPO's normalisation in its ALFWorld and Search scripts
    "cluster_and_turn": {**PAPER, "step_groups": "cluster_and_turn"},
    "first_visit": {**PAPER, "step_groups": "first_visit"},
    "next_state": {**PAPER, "step_value": "next_state"},
    "best_next_state": {**PAPER, "step_value": "best_next_state"},
    # the same three step values over the environment's states (step_state=environment)
    "paper_hidden": {**PAPER, "step_state": "environment"},
    "next_state_hidden": {**PAPER, "step_value": "next_state", "step_state": "environment"},
    "best_next_state_hidden": {**PAPER, "step_value": "best_next_state", "step_state": "environment"},
}


def compose(overrides: Sequence[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name="forge_trainer", overrides=list(overrides))


def default_variant() -> str:
    """The variant forge runs with by default (its ForgeValues defaults)."""
    from recipe.forge.config_rules import ForgeValues

    defaults = ForgeValues()
    for name, settings in VARIANTS.items():
        if all(getattr(defaults, key) == value for key, value in settings.items()):
            return name
    raise ValueError(f"forge's defaults {[(k, getattr(defaults, k)) for k in PAPER]} are none of the probe's variants")


def search_alternative(expert: str | None) -> str | None:
    """Search lists no actions: the other action swaps the expert's kind (a search for an answer, an answer for a
    search of the same text)."""
    if expert is None:
        return None
    if expert.startswith("<search>"):
        return "<answer>unknown</answer>"
    return "<search>" + expert.removeprefix("<answer>").removesuffix("</answer>") + "</search>"


def play(cfg, p: float, invalid: float, batches: int, seed: int) -> tuple[list[tuple[list, dict]], Any]:
    """``batches`` rollouts of the scripted learner: per batch its steps (StepRecords, with the expert consulted at
    each) and the episodes' (return, success) by traj_uid."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.testing.policies import NoisyExpert
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.run_config import load_run_config

    run = load_run_config(cfg)
    system = ExperienceSystem.from_algorithm(run.algorithm)  # clusters only: an empty library injects nothing
    envs, _ = make_envs(cfg)
    learner = NoisyExpert(envs, p, invalid, seed, other_action=search_alternative)
    out = []
    try:
        for _ in range(batches):
            batch = TrajectoryCollector(progress=False).collect(envs, learner, SamplingParams(), system.provider,
                                                                dynamic_sampling=False)
            usable = [t for t in batch.trajectories if t.failure_reason is None]
            steps = [s for t in usable for s in t.steps]
            for step in steps:
                step.expert_action = learner.experts.get((step.traj_uid, step.step))
            out.append((steps, {t.traj_uid: (t.episode_reward, t.success) for t in usable}))
    finally:
        envs.close()
    return out, run.algorithm


def step_parts(steps: list, episodes: dict, algorithm: Any, variant: dict[str, str]) -> np.ndarray:
    """(n,) the step part of the forge advantage of ``steps`` under ``variant``: the advantage the engines compute
    (step_inputs, samples_advantage) with every episode score 0 and step_advantage_w 1."""
    import torch

    from recipe.forge.config_rules import ForgeValues
    from recipe.forge.step_samples import StepSamples, samples_advantage, step_inputs

    forge = {f.name: getattr(algorithm.forge, f.name) for f in fields(ForgeValues)}
    forge.update(variant, use_step_rewards=True, step_advantage_w=1.0)
    settings = {"forge": ForgeValues(**forge), "gamma": float(algorithm.gamma),
                "invalid_action_penalty_coef": float(algorithm.invalid_action_penalty_coef)}
    samples = StepSamples.from_records(steps, {t: r for t, (r, _) in episodes.items()},
                                       {t: s for t, (_, s) in episodes.items()})
    zero, mask = torch.zeros(len(steps), 1), torch.ones(len(steps), 1)
    advantage, _ = samples_advantage("forge", zero, mask, samples, step_inputs(samples, "forge", settings), settings)
    return advantage[:, 0].numpy()


def step_table(steps: list, part: np.ndarray, batch: int) -> pd.DataFrame:
    """One row per step: its state (batch, uid, hidden state, anchor observation), action class and turn, and its
    step part."""
    from recipe.forge.experience.lesson_quality import normalise

    def kind(step) -> str:
        if not step.is_action_valid:
            return "invalid"
        if step.expert_action is not None and normalise(step.action) == normalise(step.expert_action):
            return "expert"
        return "other"

    return pd.DataFrame({
        "state": [f"{batch}|{s.uid}|{s.hidden_state}|{s.anchor_obs}" for s in steps],
        "action": [normalise(s.action) if s.is_action_valid else "<invalid>" for s in steps],
        "kind": [kind(s) for s in steps], "turn": [s.step for s in steps], "advantage": part,
    })


def measures(table: pd.DataFrame) -> tuple[dict[str, float | None], dict[str, int]]:
    """precision, clock_bias and format_signal of one environment's steps (module docstring), and their counts."""
    by_kind = table.groupby(["state", "kind"])["advantage"].mean().unstack("kind")
    for column in ("expert", "other", "invalid"):
        if column not in by_kind:
            by_kind[column] = np.nan
    compared = by_kind.dropna(subset=["expert", "other"])
    gap = compared["expert"] - compared["other"]
    right, wrong = int((gap > TIE).sum()), int((gap < -TIE).sum())
    valid = table[table["kind"] != "invalid"].groupby("state")["advantage"].mean()
    invalid = by_kind["invalid"].dropna()
    both = valid.index.intersection(invalid.index)
    cells = table.groupby(["state", "action"])
    centred_a = table["advantage"] - cells["advantage"].transform("mean")
    centred_t = table["turn"] - cells["turn"].transform("mean")
    spread = float(np.sqrt((centred_a ** 2).sum() * (centred_t ** 2).sum()))
    clock = float((centred_a * centred_t).sum() / spread) if spread > 0 else 0.0
    figures = {"precision": right / (right + wrong) if right + wrong else None, "clock_bias": clock,
               "format_signal": float((valid[both] - invalid[both]).mean()) if len(both) else None}
    counts = {"steps": int(len(table)), "compared_states": int(len(compared)), "right": right, "wrong": wrong,
              "ties": int(len(compared)) - right - wrong, "format_states": int(len(both)),
              "revisited_cells": int((cells["turn"].nunique() > 1).sum())}
    return figures, counts


def probe_environment(name: str, p: float, invalid: float, seed: int, tasks: int | None,
                      batches: int | None) -> tuple[dict, dict]:
    overrides, default_tasks, default_batches = ENVIRONMENTS[name]
    cfg = compose([*overrides, f"data.train_batch_size={tasks or default_tasks}", f"env.seed={seed}"])
    played, algorithm = play(cfg, p, invalid, batches or default_batches, seed)
    figures, counts = {}, {}
    for variant, settings in VARIANTS.items():
        tables = [step_table(steps, step_parts(steps, episodes, algorithm, settings), k)
                  for k, (steps, episodes) in enumerate(played) if steps]
        figures[variant], counts[variant] = measures(pd.concat(tables, ignore_index=True))
    return figures, counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", nargs="+", default=list(ENVIRONMENTS), choices=list(ENVIRONMENTS))
    parser.add_argument("--p", nargs="+", type=float, default=[0.5], help="P(expert action); the first is reported")
    parser.add_argument("--invalid", type=float, default=0.1, help="P(an answer that does not parse)")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per batch (default: per environment)")
    parser.add_argument("--batches", type=int, default=None, help="rollouts per environment (default: per environment)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    by_p: dict[str, dict] = {}
    counts: dict[str, dict] = {}
    for p in args.p:
        by_p[str(p)] = {}
        for env in args.env:
            by_p[str(p)][env], counts.setdefault(str(p), {})[env] = probe_environment(
                env, p, args.invalid, args.seed, args.tasks, args.batches)
    first = str(args.p[0])
    report = {"default": default_variant(), "p": args.p[0], "invalid": args.invalid, "environments": by_p[first],
              "by_p": {p: envs for p, envs in by_p.items() if p != first}, "counts": counts,
              "variants": VARIANTS}
    if args.json:
        print(json.dumps(report))
        return 0
    for p, envs in by_p.items():
        print(f"P(expert) = {p}, P(invalid) = {args.invalid}; forge's default: {report['default']}")
        print(f"{'environment':>11} | {'variant':>16} | {'precision':>9} | {'clock bias':>10} | {'format signal':>13}")
        for env, variants in envs.items():
            for variant, f in variants.items():
                cells = ["-" if f[k] is None else f"{f[k]:+.3f}" if k != "precision" else f"{f[k]:.3f}"
                         for k in ("precision", "clock_bias", "format_signal")]
                print(f"{env:>11} | {variant:>16} | {cells[0]:>9} | {cells[1]:>10} | {cells[2]:>13}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

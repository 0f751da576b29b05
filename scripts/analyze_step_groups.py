"""What the step part of the advantage rewards while a policy is still learning its answer format.

Reads the training rollouts (``trainer.rollout_data_dir``, one JSONL file per iteration) of the runs under
``--runs-dir`` and rebuilds every step's group and discounted step return with the engines' own functions
(:func:`recipe.forge.step_samples.step_returns`: ``algorithm.gamma``, invalid-action penalty after discounting;
:func:`recipe.forge.core_forge.compute_step_advantage`).
A step group is GiGPO's: the steps of one task group at one observation (``forge`` with exact clusters groups
the same steps). The step part of the advantage (``mean_norm``) is a step's return minus its group's mean.

An invalid answer leaves the state as it was, so one episode meets the same observation at several turns, and
a later visit has fewer steps left to lose: its return is higher whatever was answered. Per run, over the
iterations whose valid-action ratio is below ``--below`` (the format-learning phase), the script reports:

* ``mixed_turn_share``: the share of steps whose group holds steps of more than one turn;
* ``valid_gain``: the mean step advantage of valid answers minus that of invalid ones (what a format signal is);
* ``invalid_by_turn``: in groups of invalid answers only, the mean step advantage per turn (what the timing
  signal is: pure noise with respect to the answer).

``--step-value`` (``return``, the paper's, by default; ``next_state`` or ``best_next_state``,
recipe/forge/step_samples.py ``step_values``) says which step value the groups normalise: with ``next_state`` the
invalid-only groups are flat in the turn (one action at one state leads to one state, whatever the turn).

Usage: python scripts/analyze_step_groups.py --runs-dir runs/seeds_numberline [--gamma 0.95] [--penalty 0.1]
       [--below 0.5] [--step-value return] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe.forge.core_forge import combine_codes, compute_step_advantage, factorize  # noqa: E402
from recipe.forge.step_samples import STEP_VALUES, StepSamples, step_values  # noqa: E402


def samples_of(rows: list[dict]) -> StepSamples:
    """The StepSamples of one iteration's dumped training steps (the task group is the traj_uid up to ``-copy``)."""
    def column(values, dtype) -> np.ndarray:
        return np.array(list(values), dtype=dtype)

    return StepSamples(
        uid=column((r["traj_uid"].rsplit("-copy", 1)[0] for r in rows), object),
        traj_uid=column((r["traj_uid"] for r in rows), object),
        step_index=column((r["turn"] for r in rows), np.int64),
        step_reward=column((r["score"] for r in rows), np.float64),
        is_action_valid=column((r["valid"] for r in rows), bool),
        anchor_obs=column((r["observation"] for r in rows), object),
        next_anchor_obs=column((r.get("next_observation") for r in rows), object),
        cluster_id=column((r.get("cluster_id") for r in rows), object),
        episode_return=column((r["episode_reward"] for r in rows), np.float64),
        success=column((r["success"] for r in rows), bool),
        hidden_state=column((r.get("hidden_state", "") for r in rows), object),
        next_hidden_state=column((r.get("next_hidden_state", "") for r in rows), object),
    )


def step_groups(samples: StepSamples, returns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step (n,): the step part of the advantage over GiGPO's groups (task group, observation), computed by
    the core's :func:`compute_step_advantage` (``mean_norm``); whether its group holds more than one turn; and
    whether its group holds a valid answer."""
    uid_codes, _ = factorize(samples.uid)
    obs_codes, _ = factorize(samples.anchor_obs)
    groups, n_groups = combine_codes(uid_codes, obs_codes)
    advantage = compute_step_advantage(torch.as_tensor(returns, dtype=torch.float64), groups).numpy()
    first_turn = np.full(n_groups, np.iinfo(np.int64).max)
    last_turn = np.full(n_groups, -1)
    np.minimum.at(first_turn, groups, samples.step_index)
    np.maximum.at(last_turn, groups, samples.step_index)
    with_valid = np.bincount(groups, weights=samples.is_action_valid, minlength=n_groups) > 0
    return advantage, (first_turn != last_turn)[groups], with_valid[groups]


def analyse_run(run: Path, gamma: float, penalty: float, below: float, step_value: str = "return") -> dict | None:
    steps = mixed_total = 0
    valid_adv, invalid_adv, by_turn = [], [], defaultdict(list)
    dumps = sorted((p for p in (run / "rollouts").glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    for path in dumps:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not rows or np.mean([r["valid"] for r in rows]) >= below:
            continue
        samples = samples_of(rows)
        if step_value != "return" and any("next_observation" not in r for r in rows):
            raise ValueError(f"{path} was dumped before the steps recorded the observation they led to; "
                             f"--step-value {step_value} needs it (only --step-value return reads this run)")
        advantage, mixed, with_valid = step_groups(samples, step_values(samples, step_value, gamma, penalty))
        steps, mixed_total = steps + len(rows), mixed_total + int(mixed.sum())
        valid = samples.is_action_valid
        valid_adv += advantage[valid].tolist()
        invalid_adv += advantage[~valid].tolist()
        for turn, value in zip(samples.step_index[mixed & ~with_valid], advantage[mixed & ~with_valid]):
            by_turn[int(turn)].append(value)
    if not steps:
        return None
    return {"steps": steps, "mixed_turn_share": mixed_total / steps,
            "valid_gain": (float(np.mean(valid_adv)) - float(np.mean(invalid_adv))) if valid_adv and invalid_adv else None,
            "invalid_by_turn": {turn: float(np.mean(v)) for turn, v in sorted(by_turn.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, required=True)
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--penalty", type=float, default=0.1)
    parser.add_argument("--below", type=float, default=0.5, help="iterations with a valid-action ratio below this")
    parser.add_argument("--step-value", default="return", choices=list(STEP_VALUES),
                        help="the step value the groups normalise (algorithm.forge.step_value): the paper's return, "
                             "or what the action led to")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    out = {}
    for run in sorted(p for p in args.runs_dir.iterdir() if (p / "rollouts").is_dir()):
        result = analyse_run(run, args.gamma, args.penalty, args.below, args.step_value)
        if result is not None:
            out[run.name] = result
            turns = ", ".join(f"t{t} {a:+.2f}" for t, a in result["invalid_by_turn"].items())
            gain = "-" if result["valid_gain"] is None else f"{result['valid_gain']:+.2f}"
            print(f"{run.name:>16}: {result['steps']:4d} steps, mixed-turn groups {result['mixed_turn_share']:.2f}, "
                  f"valid - invalid {gain}, invalid-only groups by turn: {turns}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Deterministic rule-based extraction: one candidate per level of the zone, from one trajectory.

Golden zone (a successful trajectory, score = its return R):

* principle: the plan's shape for the task type (the verbs of its valid actions, consecutive repeats collapsed);
* method: the concrete action sequence for this task (consecutive repeats collapsed, long plans elided);
* example: the decisive step (the first step with the highest reward; the last step if rewards never rise),
  keyed by that step's observation.

Warning zone (a failed trajectory, score = success threshold - R, so worse failures rank higher):

* mistake: the invalid-action habit (share of invalid steps with an example) or, with none, the failed plan shape;
* pattern: the loop (the most repeated action, when one repeats), else the action the episode spent most on;
* diagnostic: the dead end (the last action and the observation it was taken at).

Two wordings (``lesson_style``): ``descriptive`` says what happened (``At "<obs>", the action "<a>" moved the
task forward.``); ``imperative`` tells the agent what to do and names the action for the state it quotes, in
the answer format the policy used (``At "<obs>", answer with <action><a></action>.``; warnings say what not to
do). The facts are the same.

Each candidate carries the task, task type, source observation and observation clusters it came from.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.library import GOLDEN, WARNING, Candidate
from recipe.forge.experience.render import check_lesson_style

MAX_PLAN_ACTIONS = 12
MAX_QUOTE = 160


def shorten(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _collapse(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def _verbs(steps: Sequence[StepRecord]) -> list[str]:
    return _collapse([s.action.split()[0].lower() for s in steps if s.is_action_valid and s.action.strip()])


def _plan(steps: Sequence[StepRecord]) -> str:
    actions = _collapse([" ".join(s.action.split()) for s in steps if s.action.strip()])
    if len(actions) > MAX_PLAN_ACTIONS:
        head, tail = MAX_PLAN_ACTIONS // 2, MAX_PLAN_ACTIONS - MAX_PLAN_ACTIONS // 2 - 1
        actions = actions[:head] + [f"... ({len(actions) - head - tail} more)"] + actions[-tail:]
    return "; ".join(actions)


def answer_form(step: StepRecord) -> str:
    """How the step answered its action: the tagged block that holds it in the response, as the environment
    parses it (``<action>+</action>``), else the action in quotes. A small model copies an answer it is shown
    in its own answer format far more readily than a quoted word (scripts/probe_experience_use.py)."""
    action = " ".join(step.action.split())
    found = re.search(r"<(\w+)>\s*" + re.escape(step.action.strip()) + r"\s*</\1>", step.response_text or "")
    if found and action:
        return f"<{found.group(1)}>{action}</{found.group(1)}>"
    return f"the action \"{shorten(action, 80)}\""


def _kind(traj: TrajectoryRecord) -> str:
    return f"{traj.task_type} tasks" if traj.task_type else "tasks like this"


def _candidate(traj: TrajectoryRecord, zone: str, level: str, text: str, score: float, step: StepRecord) -> Candidate:
    clusters = [step.cluster_id] if step.cluster_id is not None else []
    return Candidate(text=text, zone=zone, level=level, score=score, task=traj.task, task_type=traj.task_type,
                     key=step.anchor_obs, cluster_ids=clusters)


class RuleExtractor:
    """``extract(successes, failures, threshold) -> list[Candidate]`` without any model, worded in
    ``lesson_style`` (see the module docstring)."""

    def __init__(self, lesson_style: str = "descriptive"):
        self.imperative = check_lesson_style(lesson_style) == "imperative"
        self.stats = {"llm_calls": 0, "malformed": 0}

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float
    ) -> list[Candidate]:
        out: list[Candidate] = []
        for traj in successes:
            out.extend(self.golden(traj))
        for traj in failures:
            out.extend(self.warning(traj, threshold))
        return out

    def golden(self, traj: TrajectoryRecord) -> list[Candidate]:
        if not traj.steps:
            return []
        score = float(traj.episode_reward)
        first = traj.steps[0]
        verbs = _verbs(traj.steps) or ["(no valid action)"]
        rewards = [s.reward for s in traj.steps]
        best = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
        decisive = traj.steps[best] if rewards[best] > min(rewards) else traj.steps[-1]
        plan, state, action = " -> ".join(verbs), shorten(decisive.anchor_obs), shorten(decisive.action, 80)
        if self.imperative:
            texts = (f"For {_kind(traj)}, follow a plan of this shape: {plan}.",
                     f"To {shorten(traj.task, 120)}, act: {_plan(traj.steps)} (solved in {len(traj.steps)} steps).",
                     f"At \"{state}\", answer with {answer_form(decisive)}.")
        else:
            texts = (f"For {_kind(traj)}, a plan of this shape succeeded: {plan}.",
                     f"To {shorten(traj.task, 120)}: {_plan(traj.steps)} (solved in {len(traj.steps)} steps).",
                     f"At \"{state}\", the action \"{action}\" moved the task forward.")
        return [
            _candidate(traj, GOLDEN, "principle", texts[0], score, first),
            _candidate(traj, GOLDEN, "method", texts[1], score, first),
            _candidate(traj, GOLDEN, "example", texts[2], score, decisive),
        ]

    def warning(self, traj: TrajectoryRecord, threshold: float) -> list[Candidate]:
        if not traj.steps:
            return []
        score = float(threshold - traj.episode_reward)
        steps = traj.steps
        invalid = [s for s in steps if not s.is_action_valid]
        shape = " -> ".join(_verbs(steps))
        if invalid:
            sample = shorten(invalid[0].response_text or invalid[0].action, 80)
            if self.imperative:
                mistake = (f"Answer with one admissible action in the required format ({len(invalid)} of "
                           f"{len(steps)} actions were invalid, e.g. \"{sample}\").")
            else:
                mistake = (f"{len(invalid)} of {len(steps)} actions were invalid (e.g. \"{sample}\"): answer with "
                           "one admissible action in the required format.")
            mistake_step = invalid[0]
        else:
            mistake = (f"For {_kind(traj)}, do not follow this failed plan shape: {shape}." if self.imperative
                       else f"For {_kind(traj)}, this plan shape failed: {shape}.")
            mistake_step = steps[0]
        actions = [" ".join(s.action.split()) for s in steps if s.action.strip()]
        counts = Counter(actions)
        repeated, times = counts.most_common(1)[0] if counts else ("", 0)
        loop_step = next((s for s in steps if " ".join(s.action.split()) == repeated), steps[0])
        if times >= 2:
            quoted = shorten(repeated, 80)
            pattern = (f"Do not repeat \"{quoted}\": {times} times in {len(steps)} steps made no progress; after "
                       "one try, choose a different action." if self.imperative else
                       f"Repeating \"{quoted}\" ({times} times in {len(steps)} steps) made no progress: after one "
                       "try, choose a different action.")
        else:
            verb, n = Counter(a.split()[0].lower() for a in actions).most_common(1)[0] if actions else ("act", 0)
            pattern = (f"Do not spend most steps on \"{verb}\" actions: {n} of {len(steps)} did not reach the goal."
                       if self.imperative else
                       f"Spending {n} of {len(steps)} steps on \"{verb}\" actions did not reach the goal.")
        last = steps[-1]
        task, action, state = shorten(traj.task, 100), shorten(last.action, 80), shorten(last.anchor_obs)
        diagnostic = (f"At \"{state}\", do not answer with the action \"{action}\": it ended a failed attempt at "
                      f"\"{task}\" ({len(steps)} steps, return {traj.episode_reward:g})." if self.imperative else
                      f"Failed \"{task}\" after {len(steps)} steps (return {traj.episode_reward:g}): the last action "
                      f"\"{action}\" at \"{state}\" led nowhere.")
        return [
            _candidate(traj, WARNING, "mistake", mistake, score, mistake_step),
            _candidate(traj, WARNING, "pattern", pattern, score, loop_step),
            _candidate(traj, WARNING, "diagnostic", diagnostic, score, last),
        ]

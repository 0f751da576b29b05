"""Deterministic rule-based extraction: one candidate per level of the zone, from one trajectory.

Golden zone (a successful trajectory, score = its return R):

* principle: the plan's shape for the task type (the verbs of its valid actions, consecutive repeats collapsed);
* method: the concrete action sequence for this task (consecutive repeats collapsed, long plans elided);
* example: the decisive step (the first step with the highest reward; the last step if rewards never rise),
  keyed by that step's observation.

Warning zone (a failed trajectory, score = success threshold - R, so worse failures rank higher):

* mistake: the invalid-action habit (share of invalid steps with an example; ``Candidate.habit`` ``valid_answer``:
  whether the steps keep it is checkable, recipe/forge/experience/retirement.py) or, with none, the failed plan
  shape in the descriptive wording (the imperative gives no mistake then: "do not follow this failed plan shape:
  +." names an action for no state, and a small model copies the action it names);
* pattern: the loop, the action that most often left its state as it was (``StepRecord.next_anchor_obs`` equal to
  its ``anchor_obs``), when it did so at least twice at one state (imperative: among the valid actions only, so no
  invalid answer is quoted). Without a loop the descriptive wording states the action the episode spent most on;
  the imperative one gives no pattern: repeating an action across states is how a dial is turned or a line is
  walked, so "do not repeat it" would be advice against progress;
* diagnostic: the dead end (the last action and the observation it was taken at). Its action is blamed only where
  the episode shows it failed there: it left the state as it was, the environment ended the episode at it without
  a win, or scored it lowest of the episode's steps while another scored higher. An episode cut by the step limit
  after an action that moved on and scored as well as any, or a won one below the batch's threshold (the median),
  blames nothing (the imperative wording gives no diagnostic, the descriptive one states where the episode ended):
  that action may have been the right one.

Where the environment lists the admissible actions of a state (``StepRecord.admissible_actions``) and at most
``MAX_UNTRIED`` of them were never taken there in the episode, the imperative loop and dead end name those
untried actions (the dead end: "answer with <action>-</action> instead of ..."; the loop: "At "<obs>", answer with
<action>-</action>: repeating another answer here made no progress.", which leads with the state and the action
to take and quotes no repeated action, since a policy that answers one action everywhere copies the action a text
quotes first): a failure's lesson points at what is left to explore there. The imperative invalid-action habit
names the admissible actions instead of quoting the invalid answer.

Two wordings (``lesson_style``): ``descriptive`` says what happened (``At "<obs>", the action "<a>" moved the
task forward.``); ``imperative`` tells the agent what to do and names the action for the state it quotes, in
the answer format the policy used (``At "<obs>", answer with <action><a></action>.``; warnings say what not to
do, and what to try instead where the state lists few actions). The facts are the same.

Each candidate carries the task, task type, source observation and observation clusters it came from.
Every action, observation, task and verb a lesson quotes goes through :func:`bounds.shorten` (a state
``bounds.MAX_QUOTE`` = 160 characters, an action :data:`MAX_ACTION` = 80, a task 100 or 120, a verb
:data:`MAX_VERB` = 40), so a lesson's length does not grow with what it quotes.

Advice (``Candidate.advice``, kept beside the text, never rendered: what lesson_quality.py checks against the
environment's expert). A lesson that names an action for its state carries the state (the source step's anchor
observation), the actions it says to take (``do``) and not to take (``avoid``), and the expert action at the
source step (``StepRecord.expert_action``, None where the environment has none):

* golden example (both wordings): do = (the decisive action,);
* imperative loop and blamed dead end naming untried actions: do = the untried actions, avoid = (the repeated
  or failed action,) when that action was valid (an invalid answer is not named, and never is the expert's);
* blamed dead end otherwise (imperative prohibition, descriptive "led nowhere"): avoid = (the failed action,) when
  it was valid, else no advice (nothing to check); a dead end that blames nothing carries none.

Lessons about no one state's action (principle, method, the invalid-answer habit, the failed plan shape,
"after one try, choose a different action", which is also every descriptive loop) carry none. A descriptive
lesson's advice is what its words say about the same facts: its dead end names the failed action, not the
untried ones.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.bounds import one_line, shorten
from recipe.forge.experience.library import GOLDEN, WARNING, Advice, Candidate
from recipe.forge.experience.render import check_lesson_style

MAX_PLAN_ACTIONS = 12
MAX_UNTRIED = 3  # a warning names actions (the untried ones of a state, or the admissible ones) only up to this many
MAX_ACTION = 80  # a quoted action (bounds.shorten), in quotes or in the answer format
MAX_VERB = 40  # a quoted verb (an action's first word) in a plan shape
MAX_TAG = 32  # an answer tag longer than this is no answer format (the action is quoted instead)


def _collapse(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def _verb(action: str) -> str:
    """The first word of a (non-blank) ``action``, lower-cased and quoted within :data:`MAX_VERB` characters."""
    return shorten(action.split(maxsplit=1)[0].lower(), MAX_VERB)


def _verbs(steps: Sequence[StepRecord]) -> list[str]:
    return _collapse([_verb(s.action) for s in steps if s.is_action_valid and s.action.strip()])


def _plan(steps: Sequence[StepRecord]) -> str:
    actions = _collapse([shorten(s.action, MAX_ACTION) for s in steps if s.action.strip()])
    if len(actions) > MAX_PLAN_ACTIONS:
        head, tail = MAX_PLAN_ACTIONS // 2, MAX_PLAN_ACTIONS - MAX_PLAN_ACTIONS // 2 - 1
        actions = actions[:head] + [f"... ({len(actions) - head - tail} more)"] + actions[-tail:]
    return "; ".join(actions)


def answer_tag(step: StepRecord) -> str | None:
    """The tag the step's response held its action in, as the environment parsed it (``action`` for
    ``<action>+</action>``), or None when the response held the action in no tag."""
    action = step.action.strip()
    found = (re.search(rf"<(\w{{1,{MAX_TAG}}})>\s*" + re.escape(action) + r"\s*</\1>", step.response_text or "")
             if action else None)
    return found.group(1) if found else None


def answer_form(step: StepRecord, action: str | None = None, tag: str | None = None) -> str:
    """``action`` (default: the step's own) in the answer format: in ``tag`` (default: the tag the step's
    response used, ``<action>+</action>``), else in quotes. A small model copies an answer it is shown in its
    own answer format far more readily than a quoted word (scripts/probe_experience_use.py)."""
    tag, text = tag or answer_tag(step), shorten(step.action if action is None else action, MAX_ACTION)
    return f"<{tag}>{text}</{tag}>" if tag and text else f"the action \"{text}\""


def untried_actions(steps: Sequence[StepRecord], at: StepRecord) -> list[str]:
    """The actions listed as admissible at ``at``'s state that the trajectory never took at that state, in the
    environment's order; empty when it lists none, when all were tried, or when more than
    :data:`MAX_UNTRIED` are left (a long list is no advice)."""
    tried = {one_line(s.action).lower() for s in steps if s.anchor_obs == at.anchor_obs}
    left = [a for a in at.admissible_actions if one_line(a).lower() not in tried]
    return left if len(left) <= MAX_UNTRIED else []


def left_as_it_was(step: StepRecord) -> bool:
    """Whether ``step``'s action left its state as it was: the observation it led to is the one it was taken at."""
    return step.next_anchor_obs is not None and step.next_anchor_obs == step.anchor_obs


def failed_there(traj: TrajectoryRecord) -> bool:
    """Whether a warning-zone episode's last step shows its action failed at its state: it left the state as it
    was, the environment ended the episode at it (``next_anchor_obs`` None) without a win, or the environment scored
    it lowest of the episode's steps while another step scored higher (a move away from the goal, where moves
    towards it score more; a constant step cost marks nothing). A step limit keeps the state it cut the episode
    at, so an action that moved on as well as any other step and then ran out of steps is not blamed, and neither
    is the winning action of a won episode whose return was below the batch's threshold."""
    last, rewards = traj.steps[-1], [s.reward for s in traj.steps]
    return (left_as_it_was(last) or (last.next_anchor_obs is None and not traj.success)
            or last.reward == min(rewards) < max(rewards))


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _kind(traj: TrajectoryRecord) -> str:
    return f"{shorten(traj.task_type, MAX_ACTION)} tasks" if traj.task_type else "tasks like this"


def example_lesson(step: StepRecord, action: str, tag: str | None, imperative: bool) -> str:
    """The golden example's wording: ``action`` taken at ``step``'s state (imperative: in the answer format of
    ``tag``, default the tag of the step's own response; see :func:`answer_form`)."""
    state = shorten(step.anchor_obs)
    if imperative:
        return f"At \"{state}\", answer with {answer_form(step, action, tag)}."
    return f"At \"{state}\", the action \"{shorten(action, MAX_ACTION)}\" moved the task forward."


def advice_at(step: StepRecord, do: Sequence[str] = (), avoid: Sequence[str] = ()) -> Advice:
    """The advice of a lesson about ``step``'s state, with the expert's action there."""
    return Advice(step.anchor_obs, tuple(one_line(a) for a in do), tuple(one_line(a) for a in avoid),
                  step.expert_action)


def _avoided(step: StepRecord) -> tuple[str, ...]:
    """``(step's action,)`` when it was a valid action, else nothing (an invalid answer is never the expert's)."""
    return (step.action,) if step.is_action_valid and step.action.strip() else ()


def _candidate(traj: TrajectoryRecord, zone: str, level: str, text: str, score: float, step: StepRecord,
               advice: Advice | None = None, habit: str | None = None) -> Candidate:
    clusters = [step.cluster_id] if step.cluster_id is not None else []
    return Candidate(text=text, zone=zone, level=level, score=score, task=traj.task, task_type=traj.task_type,
                     key=step.anchor_obs, cluster_ids=clusters, advice=advice, habit=habit)


class RuleExtractor:
    """``extract(successes, failures, threshold) -> list[Candidate]`` without any model, worded in
    ``lesson_style`` (see the module docstring)."""

    def __init__(self, lesson_style: str = "descriptive"):
        self.imperative = check_lesson_style(lesson_style) == "imperative"
        self.stats = {"llm_calls": 0, "malformed": 0}

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float,
        batch: Sequence[TrajectoryRecord] = (),
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
        plan = " -> ".join(verbs)
        if self.imperative:
            texts = (f"For {_kind(traj)}, follow a plan of this shape: {plan}.",
                     f"To {shorten(traj.task, 120)}, act: {_plan(traj.steps)} (solved in {_steps(len(traj.steps))}).")
        else:
            texts = (f"For {_kind(traj)}, a plan of this shape succeeded: {plan}.",
                     f"To {shorten(traj.task, 120)}: {_plan(traj.steps)} (solved in {_steps(len(traj.steps))}).")
        example = example_lesson(decisive, decisive.action, None, self.imperative)
        return [
            _candidate(traj, GOLDEN, "principle", texts[0], score, first),
            _candidate(traj, GOLDEN, "method", texts[1], score, first),
            _candidate(traj, GOLDEN, "example", example, score, decisive, advice_at(decisive, do=(decisive.action,))),
        ]

    def warning(self, traj: TrajectoryRecord, threshold: float) -> list[Candidate]:
        if not traj.steps:
            return []
        score = float(threshold - traj.episode_reward)
        steps = traj.steps
        mistake, mistake_step = self._mistake(traj)
        pattern, loop_step, pattern_advice = self._pattern(steps)
        diagnostic, diagnostic_advice = self._diagnostic(traj)
        return [
            *([_candidate(traj, WARNING, "mistake", mistake, score, mistake_step,
                          habit="valid_answer" if not mistake_step.is_action_valid else None)] if mistake else []),
            *([_candidate(traj, WARNING, "pattern", pattern, score, loop_step, pattern_advice)] if pattern else []),
            *([_candidate(traj, WARNING, "diagnostic", diagnostic, score, steps[-1], diagnostic_advice)]
              if diagnostic else []),
        ]

    def _mistake(self, traj: TrajectoryRecord) -> tuple[str | None, StepRecord]:
        """The invalid-action habit (keyed at the first invalid step), else the descriptive wording's failed plan
        shape (first step) and no imperative mistake (None). The imperative wording names the admissible actions
        instead of quoting an invalid answer (a small model copies what it reads next to its answer, garbage
        included), in the answer format the episode's valid
        answers used where it has one (``Answer with one of <action>+</action>, <action>-</action>.``: the probe's
        ``habit_valid_gap``), and carries no counts, so that the habit is one entry whose support grows instead of
        one entry per count."""
        steps = traj.steps
        invalid = [s for s in steps if not s.is_action_valid]
        if not invalid:
            shape = " -> ".join(_verbs(steps))
            return (None if self.imperative else f"For {_kind(traj)}, this plan shape failed: {shape}."), steps[0]
        first = invalid[0]
        if self.imperative:
            listed = first.admissible_actions
            if 0 < len(listed) <= MAX_UNTRIED and any(map(answer_tag, steps)):
                return f"Answer with {_one_of(steps, listed)}.", first
            choices = (" (" + " or ".join(f'"{shorten(a, 40)}"' for a in listed) + ")"
                       if 0 < len(listed) <= MAX_UNTRIED else "")
            return f"Answer with exactly one admissible action{choices} in the required format.", first
        sample = shorten(first.response_text or first.action, MAX_ACTION)
        return (f"{len(invalid)} of {len(steps)} actions were invalid (e.g. \"{sample}\"): answer with one "
                "admissible action in the required format."), first

    def _pattern(self, steps: Sequence[StepRecord]) -> tuple[str | None, StepRecord, Advice | None]:
        """The loop (the action that most often left its state as it was, at least twice at one state, keyed at
        its first such step), with its advice; without one, the descriptive wording's action the episode spent most
        on and no imperative pattern (None). The imperative wording reads the valid actions only (an invalid answer
        quoted next to the policy's answer gets copied), names the actions not yet tried at the loop's state when
        there are few, and carries no counts (one entry per habit, whose support grows)."""
        counted = [s for s in steps if s.is_action_valid] if self.imperative else steps
        stuck = Counter((s.anchor_obs, one_line(s.action)) for s in counted if s.action.strip() and left_as_it_was(s))
        (state, repeated), times = stuck.most_common(1)[0] if stuck else (("", ""), 0)
        if times >= 2:
            loop_step = next(s for s in counted if s.anchor_obs == state and one_line(s.action) == repeated)
            quoted = shorten(repeated, MAX_ACTION)
            if not self.imperative:
                return (f"Repeating \"{quoted}\" ({times} times in {len(steps)} steps) made no progress: after one "
                        "try, choose a different action."), loop_step, None
            untried = untried_actions(steps, loop_step)
            if not untried:
                return (f"Do not repeat \"{quoted}\": it made no progress; after one try, choose a different action.",
                        loop_step, None)
            return (f"At \"{shorten(loop_step.anchor_obs)}\", answer with {_one_of(steps, untried)}: repeating another "
                    "answer here made no progress."), loop_step, advice_at(loop_step, untried, (repeated,))
        actions = [one_line(s.action) for s in counted if s.action.strip()]
        if self.imperative or not actions:
            none_valid = f"None of {len(steps)} answers was an admissible action."
            return (None if self.imperative else none_valid), steps[0], None
        verb, n = Counter(map(_verb, actions)).most_common(1)[0]
        first = next(s for s in counted if s.action.strip() and _verb(one_line(s.action)) == verb)
        return f"Spending {n} of {len(steps)} steps on \"{verb}\" actions did not reach the goal.", first, None

    def _diagnostic(self, traj: TrajectoryRecord) -> tuple[str | None, Advice | None]:
        """The dead end: the last action and the state it was taken at, with its advice, where the episode shows
        that action failed there (:func:`failed_there`); else no imperative diagnostic (None) and a descriptive
        one that blames nothing. The imperative wording tells the agent which actions it has not tried at that
        state (when there are few) instead of naming the failed one as a prohibition: a prohibition puts the
        failed action next to the answer (the probe measures both)."""
        steps, last = traj.steps, traj.steps[-1]
        task, action, state = shorten(traj.task, 100), shorten(last.action, MAX_ACTION), shorten(last.anchor_obs)
        if not failed_there(traj):
            return (None if self.imperative else
                    f"\"{task}\" ended below the batch's threshold after {_steps(len(steps))} (return "
                    f"{traj.episode_reward:g}), at \"{state}\" after the action \"{action}\"."), None
        failed = _avoided(last)
        prohibition = advice_at(last, avoid=failed) if failed else None
        if not self.imperative:
            return (f"Failed \"{task}\" after {_steps(len(steps))} (return {traj.episode_reward:g}): the last action "
                    f"\"{action}\" at \"{state}\" led nowhere."), prohibition
        untried = untried_actions(steps, last)
        if untried:
            named = f"\"{action}\"" if failed else "an invalid answer"
            return (f"At \"{state}\", answer with {_one_of(steps, untried)} instead of {named}, which ended a "
                    f"failed attempt ({_steps(len(steps))}, return {traj.episode_reward:g})."), \
                advice_at(last, untried, failed)
        return (f"At \"{state}\", do not answer with the action \"{action}\": it ended a failed attempt at "
                f"\"{task}\" ({_steps(len(steps))}, return {traj.episode_reward:g})."), prohibition


def _one_of(steps: Sequence[StepRecord], actions: Sequence[str]) -> str:
    """``actions`` in the answer format the trajectory used (its first tagged answer; quoted without one): one,
    or "one of a, b"."""
    tag = next((t for t in map(answer_tag, steps) if t), None)
    if len(actions) == 1:
        return answer_form(steps[0], actions[0], tag)
    quoted = [shorten(a, MAX_ACTION) for a in actions]
    return "one of " + ", ".join(f"<{tag}>{a}</{tag}>" if tag else f"\"{a}\"" for a in quoted)

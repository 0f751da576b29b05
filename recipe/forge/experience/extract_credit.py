"""Step-credit extraction (``lesson_credit: step``): state lessons from the actions compared at the same state.

The outcome extractors credit a step by its episode's outcome: every step of a won episode is golden material,
and a failed episode's last action becomes a warning even when that action was right and the episode failed
earlier or ran out of steps. :class:`CreditExtractor` credits each step as the step part of the ``forge`` /
``gigpo`` advantage does:

1. Values. Every step of the iteration's usable trajectories (the extractor's ``batch``) gets the step value the
   ``forge`` advantage normalises, by the same rule (:func:`recipe.forge.step_samples.step_values` with the run's
   ``algorithm.forge.step_value``, ``step_state``, ``algorithm.gamma`` and ``algorithm.invalid_action_penalty_coef``):
   the discounted return from the step on (the paper's ``return``) or the reward plus the value of the state the step
   led to (``next_state``, ``best_next_state``), minus the invalid-action penalty of an invalid step.
2. Groups. The steps of one task group (uid) in one step group of the advantage
   (:func:`recipe.forge.step_samples.step_group_keys` with ``algorithm.forge.step_groups``): the same observation
   cluster (``cluster_id``), or the same anchor observation where a step has no cluster; with
   ``cluster_and_turn`` also the same turn, with ``first_visit`` a trajectory's first visit only. Different uids
   are never compared: their tasks differ. A lesson is retrieved by observation, so the groups are observations
   whatever ``step_state`` (which tells the step graph's states apart by the environment's hidden state).
3. Credit. Within a group the valid steps are split by action (whitespace-normalised). With at least two
   actions, and one action whose mean value is above every other's (by more than :data:`TIE_TOLERANCE`):

   * golden ``example``: at that state, take the best action. Score: its mean return minus the runner-up's
     (the margin it won by); support: the valid steps of the group;
   * warning ``diagnostic``, one per other action: at that state, take the best action instead. Score: the
     best mean return minus that action's; support: the steps that took either.

   Scores are return gaps, in the units of the returns (as the outcome scores are), so admission ranks
   stronger evidence higher. One action only, or a best mean shared by two actions: no state lesson (the
   evidence names no single action to take). ``pattern`` stays empty: a loop is an episode's property, which
   the step comparison does not see.
4. Invalid steps take no part in the comparison: an invalid answer is never golden material, and a warning
   never quotes one (a small model copies what it reads next to its answer). Comparing a valid action with an
   invalid answer would only show that the valid one parsed (its return is higher by the penalty at least),
   which says nothing about which action is right; the invalid-action habit is the ``mistake`` level's
   lesson.

Each lesson quotes one state, the anchor observation of the group's first step (in batch order) that took the
best action; with exact clusters every step of the group has it. Its key is that observation, it is linked to
the group's cluster, and it carries :class:`Advice` (do: the best action; avoid: the worse one, for warnings;
expert: that step's ``expert_action``).

The other levels (principle, method, mistake) still come from the ``base`` extractor's outcome-based
extraction of the selected successes and failures. Its own example, pattern and diagnostic are dropped, except
where step credit has nothing to say: at a state where the batch compared no two actions (every visit took one
action), an outcome lesson that tells what to take stays (``credit_fallbacks``): a won episode's decisive action,
or the actions a failed episode never tried at its dead end or loop. Without it a policy that always answers one
action at a state never gets a lesson there, which is where a lesson naming the untried action helps most;
lessons that only forbid an action are still dropped. The
golden wording is the rule extractor's own example (:func:`extract_rule.example_lesson` of the best step), the warning
follows its diagnostic in ``lesson_style``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agent_system.config_checks import check_range
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.evolution import Extractor
from recipe.forge.experience.bounds import one_line, shorten
from recipe.forge.experience.extract_rule import MAX_ACTION, advice_at, answer_form, example_lesson
from recipe.forge.experience.library import GOLDEN, WARNING, Candidate
from recipe.forge.experience.render import check_lesson_style
from recipe.forge.step_samples import StepSamples, object_array, step_group_keys, step_values

STATE_LEVELS = ("example", "pattern", "diagnostic")  # the levels that say what to do at one state
TIE_TOLERANCE = 1e-9  # mean returns closer than this are equal (float rounding)


@dataclass
class ActionCredit:
    """The valid steps of one group that took one action, and their mean discounted step return."""

    action: str
    steps: list[StepRecord]
    mean_return: float


class CreditExtractor:
    """``extract(successes, failures, threshold, batch) -> list[Candidate]``: the ``base`` extractor's
    principle, method and mistake lessons, and state lessons credited by step return over ``batch`` (see the
    module docstring). Counts into ``base``'s stats: ``credit_states`` (groups where actions were compared) and
    ``credit_lessons`` (state lessons made)."""

    def __init__(self, base: Extractor, lesson_style: str, gamma: float, invalid_action_penalty_coef: float,
                 step_value: str = "return", step_groups: str = "cluster", step_state: str = "observation"):
        check_range("algorithm.gamma", gamma, 0.0, 1.0)
        check_range("algorithm.invalid_action_penalty_coef", invalid_action_penalty_coef, 0.0)
        self.base = base
        self.imperative = check_lesson_style(lesson_style) == "imperative"
        self.gamma = float(gamma)
        self.penalty_coef = float(invalid_action_penalty_coef)
        self.step_value = step_value
        self.step_state = step_state
        self.step_groups = step_groups
        self.stats = base.stats
        self.stats.setdefault("credit_states", 0)
        self.stats.setdefault("credit_lessons", 0)
        self.stats.setdefault("credit_fallbacks", 0)

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float,
        batch: Sequence[TrajectoryRecord] = (),
    ) -> list[Candidate]:
        outcome = self.base.extract(successes, failures, threshold, batch=batch)
        credited, compared = self.credited_states(batch)
        fallback = [c for c in outcome if c.level in STATE_LEVELS and uncompared_advice(c, compared)]
        self.stats["credit_fallbacks"] += len(fallback)
        return [c for c in outcome if c.level not in STATE_LEVELS] + credited + fallback

    def state_lessons(self, batch: Sequence[TrajectoryRecord]) -> list[Candidate]:
        """The credit-assigned example and diagnostic candidates of every step group of ``batch``."""
        return self.credited_states(batch)[0]

    def credited_states(self, batch: Sequence[TrajectoryRecord]) -> tuple[list[Candidate], set]:
        """:meth:`state_lessons`, and the states (:func:`state_of`) where actions were compared."""
        episodes: dict[str, TrajectoryRecord] = {}
        for traj in batch:
            if traj.traj_uid in episodes:
                raise ValueError(f"two trajectories of the batch share traj_uid={traj.traj_uid!r}: their step "
                                 "returns would be summed as one episode's")
            episodes[traj.traj_uid] = traj
        steps = [s for t in batch for s in t.steps]
        if not steps:
            return [], set()
        samples = StepSamples.from_records(steps, {u: t.episode_reward for u, t in episodes.items()},
                                           {u: t.success for u, t in episodes.items()})
        states = object_array([state_of(s.cluster_id, s.anchor_obs) for s in steps])
        returns = step_values(samples, self.step_value, self.gamma, self.penalty_coef, self.step_state)
        groups: dict[tuple, list[int]] = {}
        for i, (step, key) in enumerate(zip(steps, step_group_keys(samples, states, self.step_groups))):
            groups.setdefault((step.uid, int(key)), []).append(i)
        out: list[Candidate] = []
        compared: set = set()
        for rows in groups.values():
            credits = action_credits([steps[i] for i in rows], returns[rows])
            if len(credits) < 2:
                continue
            compared.add(states[rows[0]])
            self.stats["credit_states"] += 1
            lessons = self._lessons(credits, episodes)
            self.stats["credit_lessons"] += len(lessons)
            out.extend(lessons)
        return out, compared

    def _lessons(self, credits: list[ActionCredit], episodes: dict[str, TrajectoryRecord]) -> list[Candidate]:
        """The example and diagnostics of one group's ranked ``credits`` (best first); none on a tie at the top.
        ``episodes``: the batch's trajectories by traj_uid (the lessons' task is the source step's)."""
        best, runner_up = credits[0], credits[1]
        if best.mean_return - runner_up.mean_return <= TIE_TOLERANCE:
            return []
        source = best.steps[0]
        traj = episodes[source.traj_uid]
        clusters = [source.cluster_id] if source.cluster_id is not None else []
        out = [Candidate(
            text=example_lesson(source, source.action, None, self.imperative), zone=GOLDEN, level="example",
            score=best.mean_return - runner_up.mean_return, task=traj.task, task_type=traj.task_type,
            key=source.anchor_obs, cluster_ids=list(clusters), support=sum(len(c.steps) for c in credits),
            advice=advice_at(source, do=(best.action,)))]
        for worse in credits[1:]:
            out.append(Candidate(
                text=self._warning(source, worse.action), zone=WARNING, level="diagnostic",
                score=best.mean_return - worse.mean_return, task=traj.task, task_type=traj.task_type,
                key=source.anchor_obs, cluster_ids=list(clusters), support=len(best.steps) + len(worse.steps),
                advice=advice_at(source, do=(best.action,), avoid=(worse.action,))))
        return out

    def _warning(self, source: StepRecord, worse: str) -> str:
        """At the state of ``source`` (which took the best action), take it instead of ``worse``: the rule
        extractor's diagnostic wording in its lesson style, with the step comparison as the reason."""
        state, quoted = shorten(source.anchor_obs), shorten(worse, MAX_ACTION)
        if self.imperative:
            return (f"At \"{state}\", answer with {answer_form(source)} instead of \"{quoted}\", which led to a "
                    "lower return from this state in the same task.")
        best = shorten(source.action, MAX_ACTION)
        return (f"At \"{state}\", the action \"{quoted}\" led to a lower return than \"{best}\" "
                "from this state in the same task.")


def state_of(cluster_id: int | None, anchor_obs: str) -> tuple:
    """The state a step (or a lesson drawn from it) is about: its cluster, or its anchor without one."""
    return ("cluster", cluster_id) if cluster_id is not None else ("anchor", anchor_obs)


def uncompared_advice(candidate: Candidate, compared: set) -> bool:
    """Whether an outcome state lesson stays: it tells what to take (a won episode's decisive action, or the actions
    a failed episode never tried at its dead end or loop) at a state where the batch compared no two actions."""
    if candidate.advice is None or not candidate.advice.do:
        return False
    cluster = candidate.cluster_ids[0] if candidate.cluster_ids else None
    return state_of(cluster, candidate.key) not in compared


def action_credits(steps: Sequence[StepRecord], returns: np.ndarray) -> list[ActionCredit]:
    """The valid ``steps`` of one group split by action (whitespace-normalised, first-seen spelling), each with
    the mean of their ``returns`` ((len(steps),) discounted step returns), best first (ties: first seen)."""
    by_action: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        if step.is_action_valid and step.action.strip():
            by_action.setdefault(one_line(step.action), []).append(i)
    credits = [ActionCredit(action, [steps[i] for i in rows], float(np.mean(returns[rows])))
               for action, rows in by_action.items()]
    return sorted(credits, key=lambda c: -c.mean_return)


def step_credit(base: Extractor, lesson_style: str, gamma: float | None,
                invalid_action_penalty_coef: float | None, step_value: str = "return",
                step_groups: str = "cluster", step_state: str = "observation") -> CreditExtractor:
    """The extractor of ``lesson_credit: step``: ``base`` (rule or LLM) with credit-assigned state lessons, valued
    and grouped as the forge advantage is (``algorithm.forge.step_value``, ``step_state`` and ``step_groups``; a
    lesson is shown by observation, so its groups are observation clusters whatever ``step_state``). The values need
    the run's ``algorithm.gamma`` and ``algorithm.invalid_action_penalty_coef``; without them a ValueError says how
    to pass them (a silent default would rank actions by another discount than training)."""
    if gamma is None or invalid_action_penalty_coef is None:
        raise ValueError(
            "algorithm.forge.lesson_credit='step' compares actions by their discounted step returns, which need "
            "the algorithm section's gamma and invalid_action_penalty_coef: build the system with "
            "ExperienceSystem.from_algorithm(algorithm) (or pass gamma= and invalid_action_penalty_coef=)")
    return CreditExtractor(base, lesson_style, gamma, invalid_action_penalty_coef, step_value, step_groups,
                           step_state)

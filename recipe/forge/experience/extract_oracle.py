"""The oracle extractor (``algorithm.forge.extractor: oracle``): golden examples that name the environment's expert
action, so every lesson is right by construction. It measures the ceiling of a library of such lessons (what the
policy gains when the library never misleads it); it is not the paper's method and never a default.

From every usable trajectory of the iteration (the extractor protocol's ``batch``), each distinct state (anchor
observation) at which a step carried the environment's expert action (``StepRecord.expert_action``) gives one
golden ``example`` candidate:

* worded exactly as the rule extractor's example in the configured ``lesson_style``
  (:func:`recipe.forge.experience.extract_rule.example_lesson`), naming the expert action, in the imperative
  wording in the answer format of the episodes (the tag of the first tagged answer of an episode that visited
  the state; quoted when none has one);
* keyed at that state and linked to the clusters of its steps, with advice ``do=(expert,)``, ``expert=expert``;
* score: the share of the state's steps whose action was not the expert's (where the policy needs the lesson
  most); support: the trajectories that visited the state.

Where the expert named different actions at one state (an expert that depends on the path, such as a walkthrough),
the most frequent one is taught (the first seen on a tie). The candidates then go the way of any lesson: dedupe,
the rate limit (``max_strategies_per_iter``, highest score first), admission, retrieval, rendering and injection.

A batch whose steps carry no expert action at all is an error naming the key: the environment has no expert,
offered none at the states visited, or does not record it on its steps (ALFWorld, whose planner is too slow to ask
at every step), and an oracle library would stay empty without a word.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.extract_rule import advice_at, answer_tag, example_lesson
from recipe.forge.experience.lesson_quality import normalise
from recipe.forge.experience.library import GOLDEN, Candidate
from recipe.forge.experience.render import check_lesson_style


class OracleExtractor:
    """``extract(successes, failures, threshold, batch) -> list[Candidate]`` from ``batch`` alone (the module
    docstring); ``successes``, ``failures`` and ``threshold`` are not read."""

    def __init__(self, lesson_style: str = "descriptive"):
        self.imperative = check_lesson_style(lesson_style) == "imperative"
        self.stats = {"llm_calls": 0, "malformed": 0}

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float,
        batch: Sequence[TrajectoryRecord] = (),
    ) -> list[Candidate]:
        visits: dict[str, list[tuple[TrajectoryRecord, StepRecord]]] = {}
        for traj in batch:
            for step in traj.steps:
                visits.setdefault(step.anchor_obs, []).append((traj, step))
        if visits and not any(step.expert_action is not None for seen in visits.values() for _, step in seen):
            steps = sum(len(seen) for seen in visits.values())
            raise ConfigError(
                f"algorithm.forge.extractor=oracle needs the environment's expert action on the steps, and none of "
                f"this iteration's {steps} steps carried one (the environment implements no expert_action, offers "
                "none at these states, or its manager does not record it: records_expert_actions); use "
                "extractor=rule or an environment whose steps carry an expert")
        out = []
        for state, seen in visits.items():
            candidate = self._lesson(state, seen)
            if candidate is not None:
                out.append(candidate)
        return out

    def _lesson(self, state: str, seen: list[tuple[TrajectoryRecord, StepRecord]]) -> Candidate | None:
        """The example for one state from the (trajectory, step) pairs that visited it; None without an expert."""
        experts = Counter(step.expert_action for _, step in seen if step.expert_action is not None)
        if not experts:
            return None
        expert = experts.most_common(1)[0][0]
        traj, step = next((t, s) for t, s in seen if s.expert_action == expert)
        tag = next((tag for t, _ in seen for tag in map(answer_tag, t.steps) if tag), None)
        missed = sum(normalise(s.action) != normalise(expert) for _, s in seen)
        clusters = list(dict.fromkeys(s.cluster_id for _, s in seen if s.cluster_id is not None))
        return Candidate(
            text=example_lesson(step, expert, tag, self.imperative), zone=GOLDEN, level="example",
            score=missed / len(seen), task=traj.task, task_type=traj.task_type, key=state, cluster_ids=clusters,
            support=len({t.traj_uid for t, _ in seen}), advice=advice_at(step, do=(expert,)),
        )

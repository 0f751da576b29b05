"""Library evolution, once per iteration from that iteration's trajectories.

1. Partition by outcome (:func:`success_mask`): with a fixed ``success_threshold`` eta, success iff return > eta.
   With ``success_threshold: null``, eta is the batch median and success iff return > eta, or return == eta
   and eta is above the batch's lowest return: under binary rewards the median is often a winning return
   (returns [10, 10, 10, 0]: eta = 10), and the winners at the median are still the batch's successes. When
   every return is equal the returns tell nothing, and the environment's won flag decides. Trajectories that
   ended by a fault (``failure_reason`` set) teach nothing and are skipped.
2. Select the top ``top_k_trajectories`` successes (highest return, then shortest) and the bottom
   ``top_k_trajectories`` failures (lowest return, then longest).
3. Extract candidates (rule-based or LLM, from the selection; an extractor may also read the whole batch), merge exact duplicates (support adds up), then keep at most
   ``max_strategies`` golden and ``max_warnings`` warning candidates: highest score first, then support,
   then spread over levels (the i-th candidate of each level before the (i+1)-th of any), then extraction order.
4. Admit each (novelty merge / score-based admission), then prune.

Every step of this reads the trajectories in :func:`canonical_order` (by content, never by arrival or by uid):
the same episodes evolve the same library whether an engine hands them over in its environments' order or, as
verl's agent loop does, in the order they finished; ties in selection and ranking fall the same way on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate, ExperienceLibrary


class Extractor(Protocol):
    """Candidates from the selected successes and failures; ``batch`` is every usable trajectory of the
    iteration (faulted ones left out), for extractors that compare steps across a whole task group."""

    stats: dict[str, int]

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float,
        batch: Sequence[TrajectoryRecord] = (),
    ) -> list[Candidate]: ...


def success_mask(returns: np.ndarray, threshold: float | None, won: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(which trajectories are successes, eta) for the (n,) episode returns, by the rule of the module docstring;
    ``won`` (n,) bool is the environments' won flags, used only in median mode when all returns are equal
    (without it such a batch has no successes)."""
    returns = np.asarray(returns, dtype=np.float64)
    if threshold is not None:
        return returns > float(threshold), float(threshold)
    if returns.size == 0:
        return np.zeros(0, dtype=bool), 0.0
    eta = float(np.median(returns))
    lowest = float(returns.min())
    if lowest == float(returns.max()):
        flags = np.zeros(returns.size, dtype=bool) if won is None else np.asarray(won, dtype=bool)
        return flags.copy(), eta
    return (returns > eta) | ((returns == eta) & (eta > lowest)), eta


def partition(
    trajectories: Sequence[TrajectoryRecord], threshold: float | None
) -> tuple[list[TrajectoryRecord], list[TrajectoryRecord], float]:
    """(successes, failures, eta) among trajectories without a fault."""
    usable = [t for t in trajectories if t.failure_reason is None]
    if not usable:
        return [], [], float(threshold) if threshold is not None else 0.0
    success, eta = success_mask(np.array([t.episode_reward for t in usable], dtype=np.float64), threshold,
                                np.array([t.success for t in usable], dtype=bool))
    return [t for t, s in zip(usable, success) if s], [t for t, s in zip(usable, success) if not s], eta


def positive_ratio(trajectories: Sequence[TrajectoryRecord], threshold: float | None) -> float:
    """``forge/positive_ratio``: the share of the batch's trajectories that evolution counts as successes
    (:func:`partition` with the same threshold; a faulted trajectory is never one). 0 for an empty batch."""
    if not trajectories:
        return 0.0
    return len(partition(trajectories, threshold)[0]) / len(trajectories)


def canonical_order(trajectories: Sequence[TrajectoryRecord]) -> list[TrajectoryRecord]:
    """``trajectories`` sorted by what they hold: task, outcome, then each step's observation, action, validity
    and reward. Uids are left out (the engines name task groups and copies differently); trajectories equal in
    all of this are interchangeable for evolution and keep their relative order."""
    return sorted(trajectories, key=lambda t: (
        t.task, t.task_type or "", t.episode_reward, t.length, t.failure_reason or "",
        tuple((s.anchor_obs, s.action, bool(s.is_action_valid), float(s.reward)) for s in t.steps)))


def select(
    successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], k: int
) -> tuple[list[TrajectoryRecord], list[TrajectoryRecord]]:
    best = sorted(successes, key=lambda t: (-t.episode_reward, t.length))[:k]
    worst = sorted(failures, key=lambda t: (t.episode_reward, -t.length))[:k]
    return best, worst


def dedupe(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Merge candidates with identical zone, level and text (max score, summed support, joined clusters)."""
    merged: dict[tuple[str, str, str], Candidate] = {}
    for cand in candidates:
        key = (cand.zone, cand.level, cand.text)
        have = merged.get(key)
        if have is None:
            merged[key] = Candidate(**{**cand.__dict__, "cluster_ids": list(cand.cluster_ids)})
            continue
        have.score = max(have.score, cand.score)
        have.support += cand.support
        have.cluster_ids.extend(c for c in cand.cluster_ids if c not in have.cluster_ids)
    return list(merged.values())


def rate_limit(candidates: Sequence[Candidate], zone: str, limit: int) -> list[Candidate]:
    """At most ``limit`` candidates of ``zone``, ranked as described in the module docstring."""
    ours = [c for c in candidates if c.zone == zone]
    seen: dict[str, int] = {}
    turn = [0] * len(ours)  # position of each candidate among its level's, by score
    order = sorted(range(len(ours)), key=lambda i: (-ours[i].score, -ours[i].support, i))
    for i in order:
        turn[i] = seen.get(ours[i].level, 0)
        seen[ours[i].level] = turn[i] + 1
    ranked = sorted(range(len(ours)), key=lambda i: (-ours[i].score, -ours[i].support, turn[i],
                                                      LEVELS[zone].index(ours[i].level), i))
    return [ours[i] for i in ranked[:limit]]


@dataclass
class EvolutionResult:
    strategies_added: int = 0
    warnings_added: int = 0
    merged: int = 0
    rejected: int = 0
    pruned: int = 0
    successes: int = 0
    failures: int = 0
    candidates: int = 0
    threshold: float = 0.0


def evolve_library(
    library: ExperienceLibrary,
    extractor: Extractor,
    trajectories: Sequence[TrajectoryRecord],
    iteration: int,
    *,
    success_threshold: float | None,
    top_k_trajectories: int,
    max_strategies: int,
    max_warnings: int,
) -> EvolutionResult:
    successes, failures, eta = partition(trajectories, success_threshold)
    best, worst = select(successes, failures, top_k_trajectories)
    usable = [t for t in trajectories if t.failure_reason is None]
    candidates = dedupe(extractor.extract(best, worst, eta, batch=usable))
    chosen = rate_limit(candidates, GOLDEN, max_strategies) + rate_limit(candidates, WARNING, max_warnings)
    result = EvolutionResult(successes=len(successes), failures=len(failures), candidates=len(candidates),
                             threshold=eta)
    for cand in chosen:
        outcome, _ = library.admit(cand, iteration)
        if outcome == "added":
            if cand.zone == GOLDEN:
                result.strategies_added += 1
            else:
                result.warnings_added += 1
        elif outcome == "merged":
            result.merged += 1
        else:
            result.rejected += 1
    result.pruned = library.prune()
    return result

"""Wall-clock per phase of an iteration, including SLEA-RL's own share (retrieval, advantage, evolution)."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Sequence

from agent_system.multi_turn_rollout.protocols import ExperienceProvider, StepExperience, StepQuery

FORGE_PHASES = ("forge_retrieval", "adv", "forge_evolution")  # adv: the (step-level) advantages


class PhaseTimer:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def exclude(self, outer: str, inner: str) -> None:
        """``inner`` ran inside ``outer``: count it only once, under ``inner``."""
        self.seconds[outer] -= self.seconds.get(inner, 0.0)

    def metrics(self) -> dict[str, float]:
        total = sum(self.seconds.values())
        forge = sum(self.seconds.get(p, 0.0) for p in FORGE_PHASES)
        out = {f"timing_s/{name}": value for name, value in self.seconds.items()}  # verl's names (metric_names.py)
        out["timing_s/phases_total"] = total
        out["perf/forge_time_share"] = forge / total if total > 0 else 0.0
        return out


class TimedProvider:
    """An ExperienceProvider that adds the time spent in ``provide`` (clustering + retrieval) to a phase."""

    def __init__(self, inner: ExperienceProvider, timer: PhaseTimer, phase: str):
        self.inner = inner
        self.timer = timer
        self.phase = phase

    def provide(self, queries: Sequence[StepQuery]) -> list[StepExperience]:
        with self.timer.phase(self.phase):
            return self.inner.provide(queries)

    def shown(self, queries: Sequence[StepQuery], experiences: Sequence[StepExperience]) -> None:
        with self.timer.phase(self.phase):
            self.inner.shown(queries, experiences)

"""The library driver's record of what has evolved the library: every trajectory once, in a defined order.

verl trains a task group once: its replay buffer hands out each finished group once and clears it. SLEA-RL's
evolution must not depend on that alone, nor on the order verl's batch happens to hold (its sampling follows
completion, its balancing reorders rows by length), because evolution is order-dependent (the observation index
founds clusters first-come, novelty merges compare against what came before). So the driver

* orders an iteration's trajectories by (the oldest policy version that generated them, task uid, trajectory
  uid) before it absorbs and evolves on them (:func:`evolution_order`): in the synchronous mode every trajectory
  has one version and the order is by uid; in the async modes the older rollouts go first;
* keeps the uid of every trajectory it evolved on, with the iteration, for ``window`` iterations, and skips (and
  counts) a trajectory it has evolved on before (:meth:`EvolutionLedger.admit`). A trajectory can only come back
  while its task group is still in verl's TransferQueue, which the staleness bound limits to
  ``max_off_policy_threshold`` iterations; the window is that bound plus one (:data:`UNBOUNDED_WINDOW` without a
  bound);
* keeps, per library version, the library's next entry id when that version was published (``entry_marks``;
  ExperienceSystem.entry_marks): entries at or above it were not in the version a stale episode was shown, so
  the episode does not count as having visited them without being shown them (outcomes.py).

The ledger is saved with the library into every checkpoint (``forge_library/evolution_ledger.json``, written
atomically) and restored with it, so a resumed run neither re-evolves a trajectory nor forgets the marks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.runs.durable import CheckpointError, write_text_atomic

LEDGER_FILE = "evolution_ledger.json"
UNBOUNDED_WINDOW = 64  # iterations a trajectory uid is remembered when verl's staleness bound is off
FORMAT = "slea-rl-evolution-ledger"


def oldest_policy_version(trajectory: TrajectoryRecord) -> int:
    """The oldest policy version that generated any step of ``trajectory`` (-1 where none is recorded)."""
    versions = [s.policy_version for s in trajectory.steps if s.policy_version is not None]
    return min(versions) if versions else -1


def evolution_order(trajectories: Sequence[TrajectoryRecord]) -> list[TrajectoryRecord]:
    """``trajectories`` in the order evolution consumes them (module docstring), whatever order they came in."""
    return sorted(trajectories, key=lambda t: (oldest_policy_version(t), t.uid, t.traj_uid))


@dataclass
class EvolutionLedger:
    window: int = UNBOUNDED_WINDOW
    evolved: dict[str, int] = field(default_factory=dict)  # traj_uid -> the iteration that evolved on it
    entry_marks: dict[int, int] = field(default_factory=dict)  # library version -> next entry id at publication

    @classmethod
    def for_bound(cls, threshold: int | None) -> "EvolutionLedger":
        """The ledger of a run whose staleness bound is ``threshold`` (None: none)."""
        return cls(window=UNBOUNDED_WINDOW if threshold is None else int(threshold) + 1)

    def admit(self, trajectories: Sequence[TrajectoryRecord], iteration: int) -> tuple[list[TrajectoryRecord], int]:
        """(the trajectories never evolved on before, in :func:`evolution_order`; how many were left out as
        evolved on already). The admitted ones are recorded under ``iteration``; entries older than the window
        are forgotten."""
        fresh, repeated, seen = [], 0, set()
        for trajectory in evolution_order(trajectories):
            if trajectory.traj_uid in self.evolved or trajectory.traj_uid in seen:
                repeated += 1
                continue
            seen.add(trajectory.traj_uid)
            fresh.append(trajectory)
        self.evolved.update({t.traj_uid: int(iteration) for t in fresh})
        self._forget_before(int(iteration) - self.window + 1)
        return fresh, repeated

    def keep_marks(self, marks: dict[int, int]) -> None:
        """Keep the newest ``window`` of ``marks`` (library version -> next entry id) as the ledger's own."""
        self.entry_marks = {int(v): int(marks[v]) for v in sorted(marks)[-self.window:]}

    def _forget_before(self, iteration: int) -> None:
        self.evolved = {uid: it for uid, it in self.evolved.items() if it >= iteration}

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        document = {"format": FORMAT, "window": self.window, "evolved": self.evolved,
                    "entry_marks": {str(v): n for v, n in self.entry_marks.items()}}
        return write_text_atomic(Path(folder) / LEDGER_FILE, json.dumps(document))

    @classmethod
    def load(cls, folder: str | Path, window: int) -> "EvolutionLedger | None":
        """The ledger saved in ``folder`` (kept for ``window`` iterations from now on); None when there is none (a
        checkpoint written before the ledger existed); CheckpointError naming the file when it is damaged."""
        path = Path(folder) / LEDGER_FILE
        if not path.exists():
            return None
        try:
            document = json.loads(path.read_text())
            if document.get("format") != FORMAT:
                raise ValueError(f"format {document.get('format')!r}, expected {FORMAT!r}")
            evolved = {str(uid): int(it) for uid, it in document["evolved"].items()}
            marks = {int(v): int(n) for v, n in document["entry_marks"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{path} is damaged: {exc}") from exc
        return cls(window=int(window), evolved=evolved, entry_marks=marks)

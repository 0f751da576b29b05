"""The experience library on the verl driver: evolve once per iteration, publish, checkpoint, report.

The trainer hands over the iteration's trained step rows (their extra_fields); the row codec (row_codec.py) reads
them back, once, into the rollout protocol's TrajectoryRecords, the same records the embedded engine evolves
from. The driver evolves on each trajectory once, in a defined order (evolution_ledger.py), and publishes the
evolved library to the agent-loop workers at once, for the rollouts that start from then on (in verl's async
modes rollouts go on while the trainer trains). Validation passes publish on their own channel
(library_channel.py).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, Sequence

from recipe.forge.engines.verl.evolution_ledger import EvolutionLedger
from recipe.forge.engines.verl.library_channel import NO_LIBRARY, TRAIN, VALIDATION, get_or_create_broker, publish
from recipe.forge.engines.verl.row_codec import record_from_row, trajectories_from_rows
from recipe.forge.experience.metrics import reward_metrics


class RolloutServerLLM:
    """``llm(prompt) -> str`` through verl's own rollout servers (OpenAI-compatible HTTP, the current policy), for
    the LLM extractor. Lazy: the servers start after the trainer is built; the served model name is asked from
    the server's /v1/models."""

    def __init__(self, addresses: Any, max_tokens: int = 512):
        self._addresses = addresses  # callable returning verl's server addresses ("host:port")
        self.max_tokens = max_tokens
        self._client = None

    def __call__(self, prompt: str) -> str:
        if self._client is None:
            from openai import OpenAI

            from recipe.forge.experience.extract_llm import OpenAICompatibleLLM

            base_url = f"http://{self._addresses()[0]}/v1"
            model = OpenAI(base_url=base_url, api_key="EMPTY").models.list().data[0].id
            self._client = OpenAICompatibleLLM(base_url=base_url, model=model, max_tokens=self.max_tokens)
        return self._client(prompt)


class LibraryDriver:
    """Owns the ExperienceSystem on the driver; a disabled driver (non-forge estimators) only reports rewards.

    Iterations are counted from 0 (verl's global step minus one), as the embedded engine counts them, so
    warm-up gates and save schedules mean the same on both engines.
    """

    def __init__(self, system: Any, forge_cfg: Any, ledger: EvolutionLedger | None = None):
        self.system = system
        self.forge_cfg = forge_cfg
        self.ledger = ledger if ledger is not None else EvolutionLedger()
        self._broker = None
        self._published: dict[str, tuple[int, int]] = {}  # channel -> the (version, iteration) published last
        self.publisher_id = uuid.uuid4().hex  # tells workers apart the snapshots of two drivers in one job

    @classmethod
    def from_run(cls, run: Any, llm: Any = None) -> "LibraryDriver":
        """The driver of a RunConfig's typed sections (``algorithm``, and the staleness bound of ``verl``);
        ``llm`` (prompt -> text) serves ``algorithm.forge.extractor=llm``."""
        algorithm = run.algorithm
        system = None
        if str(algorithm.adv_estimator) == "forge":
            from recipe.forge.experience import ExperienceSystem

            system = ExperienceSystem.from_algorithm(algorithm, llm=llm)
        bound = run.verl.staleness.threshold if run.verl is not None else None
        return cls(system, algorithm.forge, EvolutionLedger.for_bound(bound))

    @classmethod
    def from_trainer_config(cls, config: Any, llm: Any = None) -> "LibraryDriver":
        """:meth:`from_run` of the RunConfig of the verl config ``config`` (process_config.py)."""
        from recipe.forge.engines.verl.process_config import process_run_config

        return cls.from_run(process_run_config(config), llm=llm)

    @property
    def enabled(self) -> bool:
        return self.system is not None

    @property
    def version(self) -> int:
        return int(self.system.version) if self.enabled else -1

    def begin_iteration(self, iteration: int) -> None:
        """Open ``iteration`` (gates, stats) and publish the library the workers' training rollouts retrieve from
        (unless that version was published for this iteration already, by :meth:`end_iteration`)."""
        if not self.enabled:
            return
        self.system.begin_iteration(iteration)
        self._publish(TRAIN, iteration, with_library=True)

    def publish_validation(self, iteration: int, with_library: bool = True) -> None:
        """Publish what the next validation pass runs with on the validation channel: the library as it is now,
        gated as after ``iteration`` (the embedded engine validates after an iteration with that iteration's
        gates), or no library (``val_no_library``). Training rollouts keep their own channel."""
        if self.enabled:
            self._publish(VALIDATION, iteration, with_library)

    def _publish(self, channel: str, iteration: int, with_library: bool) -> None:
        version = self.version if with_library else NO_LIBRARY
        if self._published.get(channel) == (version, iteration):
            return
        if self._broker is None:
            self._broker = get_or_create_broker()
        snapshot = None
        if with_library:  # workers restore the search instead of rebuilding it
            snapshot = dataclasses.replace(self.system.snapshot(with_search=True), iteration=int(iteration))
        publish(self._broker, self.publisher_id, version, iteration, snapshot, channel)
        self._published[channel] = (version, iteration)

    def absorb(self, rows: Sequence[dict]) -> list[int | None]:
        """The driver's cluster of each row's step, one id per row (the rows are left as they are): the
        workers' local ids resolved, steps without a cluster assigned one (None everywhere without a library).

        Only the clusters are resolved here (the experience ids are left out): ``evolve`` absorbs the same steps
        again with their experience ids, and that is where retrievals are counted and linked, once."""
        steps = [dataclasses.replace(record_from_row(row), experience_ids=()) for row in rows]
        if self.enabled:
            self.system.absorb(steps)
        return [step.cluster_id for step in steps]

    def end_iteration(self, rows: Sequence[dict], iteration: int) -> dict[str, float]:
        """Evolve from this iteration's trained rows, each trajectory once and in the ledger's order (the system
        saves itself every library_save_freq iterations), then publish the evolved library for the next
        iteration's rollouts; returns the forge/* metrics (``forge/repeated_trajectories``: trajectories left
        out because the library evolved on them before)."""
        fresh, repeated = self.ledger.admit(trajectories_from_rows(rows), iteration)
        metrics = reward_metrics(fresh, self.forge_cfg.success_threshold)
        metrics["forge/repeated_trajectories"] = float(repeated)
        if self.enabled:
            metrics.update({k: float(v) for k, v in self.system.evolve(fresh, iteration).items()})
            self.begin_iteration(iteration + 1)
        return metrics

    def save(self, path: str) -> None:
        """The library and its ledger into the checkpoint folder ``path``."""
        if self.enabled:
            self.system.save(path)
            self.ledger.keep_marks(self.system.entry_marks)
            self.ledger.save(path)

    def load(self, path: str) -> None:
        """Restore the library and its ledger from ``path`` (CheckpointError for a damaged file; a checkpoint
        written before ledgers existed restores an empty one)."""
        if not self.enabled:
            return
        self.system.load(path)  # checked in full before it replaces the library
        ledger = EvolutionLedger.load(path, self.ledger.window)
        if ledger is not None:
            self.ledger = ledger
        self.system.entry_marks = dict(self.ledger.entry_marks)

    def load_if_exists(self, path: str) -> None:
        if self.enabled and os.path.exists(path):
            self.load(path)

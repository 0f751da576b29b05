"""The experience library on the verl driver: evolve once per iteration, publish, checkpoint, report.

The trainer hands over the iteration's per-step rows (their extra_fields); the row codec (row_codec.py) reads
them back, once, into the rollout protocol's TrajectoryRecords, the same records the embedded engine evolves
from.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, Sequence

from recipe.forge.experience.metrics import reward_metrics
from recipe.forge.engines.verl.library_channel import NO_LIBRARY, get_or_create_broker, publish
from recipe.forge.engines.verl.row_codec import record_from_row, trajectories_from_rows


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

    def __init__(self, system: Any, forge_cfg: Any):
        self.system = system
        self.forge_cfg = forge_cfg
        self._broker = None
        self.publisher_id = uuid.uuid4().hex  # tells workers apart the snapshots of two drivers in one job

    @classmethod
    def from_trainer_config(cls, config: Any, llm: Any = None) -> "LibraryDriver":
        """``llm`` (prompt -> text) serves ``algorithm.forge.extractor=llm``."""
        from recipe.forge.config_schema import instantiate_algorithm

        algorithm = instantiate_algorithm(config.algorithm)  # the typed sections, handed as they are
        system = None
        if str(config.algorithm.adv_estimator) == "forge":
            from recipe.forge.experience import ExperienceSystem

            system = ExperienceSystem.from_algorithm(algorithm, llm=llm)
        return cls(system, algorithm.forge)

    @property
    def enabled(self) -> bool:
        return self.system is not None

    @property
    def version(self) -> int:
        return int(self.system.version) if self.enabled else -1

    def begin_iteration(self, iteration: int) -> None:
        """Open ``iteration`` (gates, stats) and publish the library the workers will retrieve from."""
        if not self.enabled:
            return
        self.system.begin_iteration(iteration)
        if self._broker is None:
            self._broker = get_or_create_broker()
        snapshot = self.system.snapshot(with_search=True)  # workers restore the search instead of rebuilding it
        publish(self._broker, self.publisher_id, self.version, iteration, snapshot)

    def withhold(self, iteration: int) -> None:
        """Publish no library: the workers' next episodes run without experiences (the ``val_no_library`` pass)
        until the next :meth:`begin_iteration` publishes the library again."""
        if not self.enabled:
            return
        if self._broker is None:
            self._broker = get_or_create_broker()
        publish(self._broker, self.publisher_id, NO_LIBRARY, iteration, None)

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
        """Evolve from this iteration's rows (the system saves itself every library_save_freq iterations);
        returns the forge/* metrics."""
        trajectories = trajectories_from_rows(rows)
        metrics = reward_metrics(trajectories, self.forge_cfg.success_threshold)
        if self.enabled:
            metrics.update({k: float(v) for k, v in self.system.evolve(trajectories, iteration).items()})
        return metrics

    def save(self, path: str) -> None:
        if self.enabled:
            self.system.save(path)

    def load_if_exists(self, path: str) -> None:
        if self.enabled and os.path.exists(path):
            self.system.load(path)

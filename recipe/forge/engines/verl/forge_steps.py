"""SLEA-RL's state on verl's driver across iterations, apart from verl's trainer: the experience library and the
rows it evolves from, whether self-distillation runs, the library's place in verl's checkpoints, and the
validation dump.

ForgeTrainer (trainer.py) builds one :class:`ForgeSteps` and calls it from verl's hooks, in this order:

* ``begin_iteration`` when an iteration starts: the library is published to the agent-loop workers (unless the
  last evolution published that version already);
* ``keep_iteration`` after verl's step, with the iteration's trained step rows: their episode and version metrics;
* ``checkpoint_saved`` when verl wrote a checkpoint this iteration;
* ``end_iteration`` after verl's weight sync: evolution from the kept rows (each trajectory once, in the ledger's
  order), the evolved library published for the rollouts that start from then on, the forge/* metrics, and the
  library and its ledger saved into that checkpoint;
* ``begin_validation``, ``keep_validation_batch``, ``end_validation`` around each validation pass (``val`` with the
  library, then, with a library, ``val_no_library`` without it, as on the embedded engine): the pass's
  ``<pass>/*`` metrics, and with ``trainer.rollout_data_dir`` its rows dumped as ``<pass>/<global step>.jsonl``.

It needs no actor worker (only Ray, for the library's broker), so it runs without verl's trainer as well.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from verl.utils.debug import marked_timer

from agent_system.multi_turn_rollout.protocols import RolloutBatch
from agent_system.multi_turn_rollout.rollout_loop import rollout_metrics
from recipe.forge.runs.rollout_dump import decoded_prompt, rollout_dump
from recipe.forge.runs.validation import pass_metrics
from recipe.forge.engines.verl.distill import check_distillation_config
from recipe.forge.engines.verl.distribution import distribution_metrics
from recipe.forge.engines.verl.library_driver import LibraryDriver, RolloutServerLLM
from recipe.forge.engines.verl.process_config import process_run_config
from recipe.forge.engines.verl.row_codec import record_from_row, trajectories_from_rows
from recipe.forge.engines.verl.validation_dump import fetch_rows, write_validation
from recipe.forge.engines.verl.versions import version_metrics

WITH_LIBRARY, WITHOUT_LIBRARY = "val", "val_no_library"  # the validation passes, as the embedded engine names them


def iteration_metrics(rows: Sequence[dict]) -> dict[str, float]:
    """The episode metrics of an iteration's step rows by the embedded engine's own function
    (rollout_loop.rollout_metrics over the trajectories the rows encode: success overall and per task type,
    returns, lengths, valid actions, ``task_score/mean``, ``failures/*``, the prompt-length rule's ``prompt/*``),
    and how the rollout was distributed (distribution.distribution_metrics: workers, split task groups, servers,
    library versions)."""
    trajectories = trajectories_from_rows(rows)
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    return {**rollout_metrics(RolloutBatch(steps, trajectories)), **distribution_metrics(rows)}


class ForgeSteps:
    """The driver's SLEA-RL state; see the module docstring for the order of the calls.

    Attributes:
        run: the run's typed config (recipe/forge/run_config.py), built once in this process from verl's config.
        library: the LibraryDriver (disabled for the estimators other than forge).
        distill: self-distillation runs (``algorithm.forge.use_distillation`` with a library).
    """

    def __init__(self, config: Any, llm_addresses: Callable[[], Any] | None = None,
                 decode: Callable[[list[int]], str] | None = None):
        """``config``: the verl config this process was given; ``llm_addresses`` (-> the rollout servers'
        addresses) serves ``algorithm.forge.extractor=llm``; ``decode`` (token ids -> text) writes the prompts of
        the validation dump (``trainer.rollout_data_dir``)."""
        self.run = process_run_config(config)
        forge = self.run.algorithm.forge
        dump_dir = self.run.trainer.rollout_data_dir
        llm_extractor = forge.extractor == "llm"
        if llm_extractor and llm_addresses is None:
            raise ValueError("algorithm.forge.extractor=llm needs the rollout servers' addresses (llm_addresses)")
        if dump_dir and decode is None:
            raise ValueError("trainer.rollout_data_dir needs the tokenizer's decode to write the prompts")
        llm = RolloutServerLLM(llm_addresses) if llm_extractor else None
        self.library = LibraryDriver.from_run(self.run, llm=llm)
        self.distill = bool(forge.use_distillation) and self.library.enabled
        if self.distill:
            check_distillation_config(self.run.algorithm, self.run.env)
        self._dump = rollout_dump(dump_dir, decoded_prompt(decode))
        self._iteration_rows: list[dict] = []
        self._checkpoint_folder: str | None = None
        self._validation_rows: list[dict] = []

    def begin_iteration(self, iteration: int) -> None:
        """Open ``iteration`` (counted from 0: verl's global step minus one) and publish the library to the
        agent-loop workers."""
        self.library.begin_iteration(iteration)

    def keep_iteration(self, rows: Sequence[dict], policy_version: int) -> dict[str, float]:
        """Keep this iteration's trained step rows (their extra_fields; no padding or distillation row) for
        ``end_iteration``; returns their :func:`iteration_metrics` and the versions the steps were generated with
        against the policy being trained (version ``policy_version``) and the library before this iteration's
        evolution (versions.version_metrics)."""
        self._iteration_rows = list(rows)
        records = [record_from_row(row) for row in self._iteration_rows]
        library_version = self.library.version if self.library.enabled else None
        return {**iteration_metrics(self._iteration_rows), **version_metrics(records, policy_version, library_version)}

    def checkpoint_saved(self, folder: str) -> None:
        """verl wrote this iteration's checkpoint into ``folder``: ``end_iteration`` saves the library into it once
        this iteration evolved it."""
        self._checkpoint_folder = folder

    def end_iteration(self, iteration: int, timing_raw: dict) -> dict[str, float]:
        """Evolve the library from the kept rows (timed as ``forge_library`` in ``timing_raw``), then save it into
        the checkpoint verl wrote this iteration, if any; returns the forge/* metrics of the evolution."""
        with marked_timer("forge_library", timing_raw, color="purple"):
            metrics = self.library.end_iteration(self._iteration_rows, iteration)
        self._iteration_rows = []
        if self._checkpoint_folder is not None:
            self.library.save(os.path.join(self._checkpoint_folder, "forge_library"))
            self._checkpoint_folder = None
        return metrics

    @property
    def validation_passes(self) -> tuple[str, ...]:
        """``val`` (with the library), then ``val_no_library`` when there is a library to leave out."""
        return (WITH_LIBRARY, WITHOUT_LIBRARY) if self.library.enabled else (WITH_LIBRARY,)

    def validate(self, iteration: int, global_step: int, run_pass: Callable[[], dict[str, float]]) -> dict[str, float]:
        """The validation rule after ``iteration``: each of :attr:`validation_passes` opened by
        :meth:`begin_validation`, run by ``run_pass`` (verl's own ``_validate`` in ForgeTrainer: the held-out tasks,
        ``val_kwargs.n`` copies each, sampled through the ValidationRowTap that feeds :meth:`keep_validation_batch`)
        and reported by :meth:`end_validation`. What ``run_pass`` returns (verl's ``val-core/*``) is kept for the
        pass with the library only: the second pass's would overwrite it."""
        metrics: dict[str, float] = {}
        for pass_name in self.validation_passes:
            self.begin_validation(iteration, pass_name)
            pass_metrics = run_pass()
            if pass_name == WITH_LIBRARY:
                metrics.update(pass_metrics)
            metrics.update(self.end_validation(global_step, pass_name))
        return metrics

    def begin_validation(self, iteration: int, pass_name: str = WITH_LIBRARY) -> None:
        """Publish what the pass runs with, on the library's validation channel: for ``val`` the library as it is
        now, so validation after ``iteration`` runs with the library evolved from it, as on the embedded engine;
        for ``val_no_library`` no library. Training rollouts (verl's async modes run them meanwhile) keep the
        training channel's library."""
        self.library.publish_validation(iteration, with_library=pass_name == WITH_LIBRARY)
        self._validation_rows = []

    def keep_validation_batch(self, batch: Any) -> None:
        """Keep the rows of a validation batch (a KVBatchMeta) verl sampled, before verl clears them."""
        self._validation_rows.extend(fetch_rows(batch))

    def end_validation(self, global_step: int, pass_name: str = WITH_LIBRARY) -> dict[str, float]:
        """The pass's ``<pass_name>/*`` metrics from its kept rows (validation.pass_metrics, as on the embedded
        engine: episode metrics, and the shown lessons' quality for ``val`` with a library); with
        ``trainer.rollout_data_dir`` the rows as ``<pass_name>/<global_step>.jsonl``."""
        if not self._validation_rows:
            raise RuntimeError(f"the {pass_name} pass kept no rows: verl's replay buffer must be wrapped in "
                               "ValidationRowTap(buffer, keep_validation_batch), as ForgeTrainer builds it")
        trajectories = trajectories_from_rows(self._validation_rows)
        self._validation_rows = []
        system = self.library.system if self.library.enabled and pass_name == WITH_LIBRARY else None
        if self._dump is not None:
            write_validation(self._dump, trajectories, global_step, system.library if system else None, pass_name)
        steps = [step for trajectory in trajectories for step in trajectory.steps]
        return pass_metrics(pass_name, RolloutBatch(steps, trajectories), system)

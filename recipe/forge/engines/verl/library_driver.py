"""The experience library on the verl driver: evolve once per iteration, publish, checkpoint, report.

The trainer hands over the iteration's per-step rows (their extra_fields, see step_batch.STEP_FIELDS); they are
regrouped into the rollout protocol's TrajectoryRecords, the same records the embedded engine evolves from.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any, Sequence

import ray

from agent_system.multi_turn_rollout.protocols import StepExperience, StepRecord, TrajectoryRecord
from agent_system.multi_turn_rollout.step import build_messages
from recipe.forge.experience.metrics import RetrievalStats, reward_metrics
from recipe.forge.engines.verl.library_channel import get_or_create_broker


def rows_to_step_records(rows: Sequence[dict]) -> list[StepRecord]:
    """One StepRecord per row, in row order, read back from the fields the agent loop wrote from its StepRecords
    (the messages are rebuilt by the shared rule). Token ids are not in extra_fields (evolution works on text);
    a row that also holds its ``prompt_ids`` (the rollout dump adds the batch's prompt) gives them to the record."""
    return [_row_to_step_record(r) for r in rows]


def _row_to_step_record(r: dict) -> StepRecord:
    experience = StepExperience(str(r.get("experience_text") or ""), placement=r.get("experience_placement", "system"))
    messages, plain = build_messages(r.get("prompt_text", ""), None, experience)
    return StepRecord(
        uid=str(r["traj_uid"]).rsplit("-", 1)[0],
        traj_uid=str(r["traj_uid"]),
        step=int(r["step_index"]),
        anchor_obs=str(r["anchor_obs"]),
        messages=messages,
        plain_messages=plain,
        response_text=str(r.get("response_text", "")),
        action=str(r.get("action", "")),
        prompt_ids=[int(i) for i in r.get("prompt_ids") or ()],
        response_ids=[],
        logprobs=[],
        reward=float(r["step_reward"]),
        is_action_valid=bool(r["is_action_valid"]),
        done=False,
        cluster_id=None if r.get("cluster_id") is None else int(r["cluster_id"]),
        experience_ids=tuple(r.get("experience_ids") or ()),
        info={"library_version": int(r.get("library_version", -1))},
        admissible_actions=tuple(str(a) for a in r.get("admissible_actions") or ()),
        expert_action=None if r.get("expert_action") is None else str(r["expert_action"]),
    )


def rows_to_trajectories(rows: Sequence[dict]) -> list[TrajectoryRecord]:
    """Regroup per-step rows into trajectories ordered by step index (one record per traj_uid)."""
    by_traj: dict[str, list[tuple[StepRecord, dict]]] = defaultdict(list)
    for record, row in zip(rows_to_step_records(rows), rows):
        by_traj[record.traj_uid].append((record, row))
    trajectories = []
    for traj_uid, pairs in by_traj.items():
        pairs.sort(key=lambda pair: pair[0].step)
        records = [record for record, _ in pairs]
        records[-1].done = True
        last = pairs[-1][1]
        trajectories.append(
            TrajectoryRecord(
                uid=records[0].uid,
                traj_uid=traj_uid,
                task=str(last.get("task", "")),
                task_type=last.get("task_type"),
                steps=records,
                episode_reward=float(last["episode_return"]),
                success=bool(last["success"]),
                length=len(records),
                failure_reason=last.get("failure_reason"),
            )
        )
    return trajectories


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
        ray.get(self._broker.publish.remote(self.publisher_id, self.version, iteration, snapshot))

    def absorb(self, rows: Sequence[dict]) -> list[int | None]:
        """Resolve the workers' local cluster ids to the driver's clusters; returns one id per row.

        Only the clusters are resolved here (the experience ids are left out): ``evolve`` absorbs the same steps
        again with their experience ids, and that is where retrievals are counted and linked, once."""
        records = rows_to_step_records(rows)
        if self.enabled:
            for record in records:
                record.experience_ids = ()
            self.system.absorb(records)
        return [record.cluster_id for record in records]

    def end_iteration(self, rows: Sequence[dict], iteration: int) -> dict[str, float]:
        """Evolve from this iteration's rows (the system saves itself every library_save_freq iterations);
        returns the forge/* metrics."""
        trajectories = rows_to_trajectories(rows)
        metrics = reward_metrics(trajectories, self.forge_cfg.success_threshold)
        if self.enabled:
            # retrieval ran in the rollout workers: the provider counters come from the steps they produced
            self.system.stats = RetrievalStats.from_rows(
                [r.get("experience_ids") or () for r in rows], [bool(r.get("experience_fallback")) for r in rows]
            )
            metrics.update({k: float(v) for k, v in self.system.evolve(trajectories, iteration).items()})
        return metrics

    def save(self, path: str) -> None:
        if self.enabled:
            self.system.save(path)

    def load_if_exists(self, path: str) -> None:
        if self.enabled and os.path.exists(path):
            self.system.load(path)

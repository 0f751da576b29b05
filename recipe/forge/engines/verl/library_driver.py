"""The experience library on the verl driver: evolve once per iteration, publish, checkpoint, report.

The trainer hands over the iteration's per-step rows (their extra_fields, see step_batch.STEP_FIELDS); they are
regrouped into the rollout protocol's TrajectoryRecords, the same records the embedded engine evolves from.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Sequence

import numpy as np
import ray
from omegaconf import OmegaConf

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.engines.verl.library_channel import get_or_create_broker


def rows_to_trajectories(rows: Sequence[dict], uids: Sequence[str] | None = None) -> list[TrajectoryRecord]:
    """Regroup per-step rows into trajectories ordered by step index (one record per traj_uid)."""
    by_traj: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_traj[str(row["traj_uid"])].append(row)
    trajectories = []
    for traj_uid, steps in by_traj.items():
        steps.sort(key=lambda r: int(r["step_index"]))
        uid = traj_uid.rsplit("-", 1)[0]
        records = [
            StepRecord(
                uid=uid,
                traj_uid=traj_uid,
                step=int(r["step_index"]),
                anchor_obs=str(r["anchor_obs"]),
                messages=_messages(r.get("experience_text", ""), r.get("prompt_text", "")),
                plain_messages=_messages("", r.get("prompt_text", "")),
                response_text=str(r.get("response_text", "")),
                action=str(r.get("action", "")),
                prompt_ids=[],
                response_ids=[],
                logprobs=[],
                reward=float(r["step_reward"]),
                is_action_valid=bool(r["is_action_valid"]),
                done=k == len(steps) - 1,
                cluster_id=None if int(r["cluster_id"]) < 0 else int(r["cluster_id"]),
                experience_ids=tuple(r.get("experience_ids") or ()),
                info={"library_version": int(r.get("library_version", -1))},
            )
            for k, r in enumerate(steps)
        ]
        last = steps[-1]
        trajectories.append(
            TrajectoryRecord(
                uid=uid,
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


def _messages(experience_text: str, prompt_text: str) -> list[dict]:
    system = [{"role": "system", "content": experience_text}] if experience_text else []
    return system + [{"role": "user", "content": prompt_text}]


def reward_metrics(trajectories: Sequence[TrajectoryRecord]) -> dict[str, float]:
    """The seed's forge/reward_* metrics over one value per episode."""
    if not trajectories:
        return {}
    returns = np.array([t.episode_reward for t in trajectories], dtype=np.float64)
    return {
        "forge/reward_mean": float(returns.mean()),
        "forge/reward_std": float(returns.std()),
        "forge/positive_ratio": float((returns > 0).mean()),
    }


class LibraryDriver:
    """Owns the ExperienceSystem on the driver; a disabled driver (non-forge estimators) only reports rewards."""

    def __init__(self, system: Any, save_freq: int, checkpoint_dir: str):
        self.system = system
        self.save_freq = int(save_freq)
        self.checkpoint_dir = checkpoint_dir
        self.version = 0
        self._broker = None

    @classmethod
    def from_trainer_config(cls, config: Any) -> "LibraryDriver":
        forge = config.algorithm.forge
        system = None
        if str(config.algorithm.adv_estimator) == "forge":
            from recipe.forge.experience import ExperienceSystem

            section = OmegaConf.to_container(forge, resolve=True) if OmegaConf.is_config(forge) else forge
            system = ExperienceSystem.from_config(section)
        return cls(system, forge.library_save_freq, forge.checkpoint_dir)

    @property
    def enabled(self) -> bool:
        return self.system is not None

    def publish(self) -> None:
        """Send the current library (with its version) to the agent-loop workers."""
        if not self.enabled:
            return
        snapshot = self.system.snapshot()
        self.version = int(getattr(snapshot, "version", self.version))
        if self._broker is None:
            self._broker = get_or_create_broker()
        ray.get(self._broker.publish.remote(self.version, snapshot))

    def end_iteration(self, rows: Sequence[dict], iteration: int) -> dict[str, float]:
        """Evolve from this iteration's rows, publish, checkpoint on schedule; returns forge/* metrics."""
        trajectories = rows_to_trajectories(rows)
        metrics = reward_metrics(trajectories)
        if not self.enabled:
            return metrics
        self.system.evolve(trajectories, iteration)
        self.publish()
        if iteration % self.save_freq == 0:
            self.save(os.path.join(self.checkpoint_dir, f"iteration_{iteration}"))
        metrics["forge/library_version"] = float(self.version)
        metrics.update({k if k.startswith("forge/") else f"forge/{k}": float(v) for k, v in self.system.metrics().items()})
        return metrics

    def save(self, path: str) -> None:
        if self.enabled:
            os.makedirs(path, exist_ok=True)
            self.system.save(path)

    def load_if_exists(self, path: str) -> None:
        if self.enabled and os.path.exists(path):
            self.system.load(path)

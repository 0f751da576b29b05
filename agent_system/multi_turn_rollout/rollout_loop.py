"""TrajectoryCollector: runs B x G episodes with any Generator and returns one training sample per step.

Per step, for the environments still active only: the shared step path (``step.prepare_steps``) retrieves the
experiences for the raw (anchor) observations and builds the messages (by default [system: experience text (when
non-empty), user: prompt]), which the collector's ``prompt_budget`` (``prompt_fit.py``) fits into the prompt length,
the generator answers all of them in one call, the manager projects and applies the
answers, ``step.finish_step`` makes the StepRecords (with each environment's expert action at the state it acted
on, where it has one) and the optional step observer sees them. Finished environments cost no generation.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from agent_system.environments.base import EnvironmentManagerBase, Observations
from agent_system.multi_turn_rollout.protocols import (
    ExperienceProvider,
    Generator,
    RolloutBatch,
    SampleStream,
    SamplingParams,
    StepObserver,
    StepQuery,
    StepRecord,
    TrajectoryRecord,
)
from agent_system.multi_turn_rollout.prompt_fit import PromptBudget, prompt_metrics
from agent_system.multi_turn_rollout.step import finish_step, prepare_steps, report_shown, response_text


def failure_category(reason: str) -> str:
    """A metric-friendly category of a failure reason: the text before the first colon."""
    return reason.split(":", 1)[0].strip()


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Success rate (overall and per task type), episode reward and length, valid-action ratio, failures, and
    ``task_score/mean`` (the final step's ``info["task_score"]``, e.g. WebShop's purchase score in [0, 1]) where
    the environment reports one; a trajectory without steps scores 0. The one function of every engine's episode
    metrics, training and validation: the verl engine computes them from the trajectories its rows encode."""
    trajs = batch.trajectories
    metrics: dict[str, float] = {"num_trajectories": float(len(trajs)), "num_steps": float(len(batch.steps)),
                                 **prompt_metrics(batch.steps)}
    if not trajs:
        return metrics
    success = np.array([t.success for t in trajs], dtype=np.float64)
    rewards = np.array([t.episode_reward for t in trajs], dtype=np.float64)
    lengths = np.array([t.length for t in trajs], dtype=np.float64)
    metrics.update(
        {
            "success_rate": float(success.mean()),
            "episode_reward/mean": float(rewards.mean()),
            "episode_reward/std": float(rewards.std()),
            "episode_reward/max": float(rewards.max()),
            "episode_reward/min": float(rewards.min()),
            "episode_length/mean": float(lengths.mean()),
            "episode_length/max": float(lengths.max()),
        }
    )
    if batch.steps:
        metrics["valid_action_ratio"] = float(np.mean([s.is_action_valid for s in batch.steps]))
    by_type: dict[str, list[float]] = defaultdict(list)
    for t, s in zip(trajs, success):
        if t.task_type is not None:
            by_type[str(t.task_type)].append(s)
    for task_type, values in by_type.items():
        metrics[f"success_rate/{task_type}"] = float(np.mean(values))
    scores = [final_task_score(t) for t in trajs]
    if any(score is not None for score in scores):
        metrics["task_score/mean"] = float(np.mean([score or 0.0 for score in scores]))
    failures = [failure_category(t.failure_reason) for t in trajs if t.failure_reason]
    metrics["failures/total"] = float(len(failures))
    for category in set(failures):
        metrics[f"failures/{category}"] = float(failures.count(category))
    return metrics


def final_task_score(trajectory: TrajectoryRecord) -> float | None:
    """The ``task_score`` of a trajectory's last step, or None when its environment reports none."""
    if not trajectory.steps:
        return None
    score = trajectory.steps[-1].info.get("task_score")
    return None if score is None else float(score)


class TrajectoryCollector:
    """Engine-agnostic multi-turn rollout over an EnvironmentManagerBase.

    dynamic_sampling: drop task groups whose episode rewards are all equal (no learning signal for a
    group-relative advantage) and roll out fresh tasks, up to ``max_num_gen_batches`` rollouts in all
    (0 = no limit, as in verl's ``algorithm.filter_groups``); if the limit is reached with fewer than B
    informative groups, the batch is filled up with dropped groups (reported in
    ``dynamic_sampling/filled_groups``) so that it always holds B groups.
    """

    def __init__(self, dynamic_sampling: bool = False, max_num_gen_batches: int = 4, progress: bool = False,
                 prompt_budget: PromptBudget | None = None):
        """``prompt_budget``: the prompt-length rule (None: prompts are generated whatever their length, as on a chat
        endpoint that enforces its own context)."""
        if isinstance(max_num_gen_batches, bool) or not isinstance(max_num_gen_batches, int) or max_num_gen_batches < 0:
            raise ValueError(f"max_num_gen_batches={max_num_gen_batches!r} must be an integer >= 0 (0 = no limit)")
        self.dynamic_sampling = dynamic_sampling
        self.max_num_gen_batches = max_num_gen_batches
        self.progress = progress
        self.prompt_budget = prompt_budget
        self.generation_calls = 0  # generator.generate calls made by this collector (all rollouts)

    @classmethod
    def from_config(cls, config: Any, progress: bool = False) -> "TrajectoryCollector":
        """Dynamic sampling from verl's ``algorithm.filter_groups`` (enable, max_num_gen_batches) of a run
        config (DictConfig or mapping); off when the section is absent."""
        algorithm = _get(config, "algorithm")
        groups = _get(algorithm, "filter_groups") if algorithm is not None else None
        if groups is None:
            return cls(progress=progress)
        return cls(dynamic_sampling=bool(_get(groups, "enable") or False), max_num_gen_batches=int(_get(groups, "max_num_gen_batches") or 0), progress=progress)

    def collect(
        self,
        envs: EnvironmentManagerBase,
        generator: Generator,
        sampling: SamplingParams,
        experience_provider: ExperienceProvider | None = None,
        step_observer: StepObserver | None = None,
        seeds: Sequence[int] | None = None,
        dynamic_sampling: bool | None = None,
        streams: Sequence[SampleStream] | None = None,
    ) -> RolloutBatch:
        """Roll out B tasks x G copies (``seeds``: the B task seeds of the first rollout; default: the
        manager's next seeds) and return every step sample, every trajectory and the metrics. ``streams``: one
        sample stream per environment (B x G), each environment's responses drawn from its own (the generator
        must take ``streams``); not with dynamic sampling, whose later rollouts are new episodes."""
        use_ds = self.dynamic_sampling if dynamic_sampling is None else dynamic_sampling
        if streams is not None:
            if use_ds:
                raise ValueError("sample streams are per episode: dynamic sampling's extra rollouts have none")
            if len(streams) != envs.num_envs:
                raise ValueError(f"{len(streams)} sample streams for {envs.num_envs} environments")
        if not use_ds:
            batch = self._rollout(envs, generator, sampling, experience_provider, step_observer, seeds, streams)
            batch.metrics.update(rollout_metrics(batch))
            return batch
        return self._collect_dynamic(envs, generator, sampling, experience_provider, step_observer, seeds)

    def _collect_dynamic(self, envs, generator, sampling, provider, observer, seeds) -> RolloutBatch:
        kept: list[list[TrajectoryRecord]] = []
        dropped: list[list[TrajectoryRecord]] = []
        rounds = 0
        all_success: list[bool] = []
        while (self.max_num_gen_batches == 0 or rounds < self.max_num_gen_batches) and len(kept) < envs.num_tasks:
            batch = self._rollout(envs, generator, sampling, provider, observer, seeds if rounds == 0 else None)
            rounds += 1
            all_success.extend(t.success for t in batch.trajectories)
            for group in _groups(batch.trajectories):
                rewards = np.array([t.episode_reward for t in group])
                (kept if np.ptp(rewards) > 0 else dropped).append(group)
        informative = len(kept)
        groups = (kept + dropped)[: envs.num_tasks]
        trajs = [t for g in groups for t in g]
        out = RolloutBatch(steps=[s for t in trajs for s in t.steps], trajectories=trajs)
        out.metrics.update(rollout_metrics(out))
        out.metrics.update(
            {
                "dynamic_sampling/num_gen_batches": float(rounds),
                "dynamic_sampling/informative_groups": float(informative),
                "dynamic_sampling/filled_groups": float(max(0, envs.num_tasks - informative)),
                # success over everything rolled out: the kept batch's success_rate is biased by the filter
                "dynamic_sampling/success_rate_all": float(np.mean(all_success)),
            }
        )
        return out

    def _rollout(self, envs, generator, sampling, provider, observer, seeds, streams=None) -> RolloutBatch:
        obs, infos = envs.reset(seeds)
        n = envs.num_envs
        tasks = [str(info.get("task", "")) for info in infos]
        task_types = [info.get("task_type") for info in infos]
        per_env: list[list[StepRecord]] = [[] for _ in range(n)]
        with tqdm(total=envs.max_steps, desc="rollout steps", disable=not self.progress, leave=False) as bar:
            while envs.active.any():
                idx = np.flatnonzero(envs.active).tolist()
                records, obs = self._step(envs, generator, sampling, provider, obs, idx, tasks, task_types, streams)
                for i, rec in zip(idx, records):
                    per_env[i].append(rec)
                if observer is not None:
                    observer.observe(records)
                bar.update(1)
        trajs = [
            TrajectoryRecord(
                uid=envs.uids[i],
                traj_uid=envs.traj_uids[i],
                task=tasks[i],
                task_type=task_types[i],
                steps=per_env[i],
                episode_reward=float(envs.episode_reward[i]),
                success=bool(envs.won[i]),
                length=len(per_env[i]),
                failure_reason=envs.failure_reason[i],
            )
            for i in range(n)
        ]
        return RolloutBatch(steps=[s for t in trajs for s in t.steps], trajectories=trajs)

    def _step(self, envs, generator, sampling, provider, obs: Observations, idx, tasks, task_types,
              streams=None) -> tuple[list[StepRecord], Observations]:
        """One generation call for the active environments ``idx`` (from their own sample streams, when given),
        then one environment step; returns the step records and the next observations."""
        queries = [
            StepQuery(anchor_obs=obs.anchor[i], task=tasks[i], task_type=task_types[i], uid=envs.uids[i],
                      traj_uid=envs.traj_uids[i], step=int(envs.step_count[i]), admissible_actions=obs.admissible[i])
            for i in idx
        ]
        prompts, images = [obs.text[i] for i in idx], [obs.image[i] for i in idx]
        prepared = prepare_steps(queries, prompts, images, provider)
        if self.prompt_budget is not None:
            prepared = [self.prompt_budget.fit(p, prompt, image) for p, prompt, image in zip(prepared, prompts, images)]
        report_shown(provider, prepared)
        experts = envs.recorded_expert_actions(idx)  # at the state acted on, before the environment steps
        hidden = envs.hidden_state_of(idx)
        messages = [p.messages for p in prepared]
        if streams is None:
            outputs = generator.generate(messages, sampling)
        else:
            outputs = generator.generate(messages, sampling, streams=[streams[i] for i in idx])
        self.generation_calls += 1
        if len(outputs) != len(idx):
            raise ValueError(f"generator returned {len(outputs)} outputs for {len(idx)} conversations")
        actions: list[str | None] = [None] * envs.num_envs
        for i, out in zip(idx, outputs):
            actions[i] = response_text(out)
        next_obs, rewards, dones, infos = envs.step(actions)
        nexts = envs.next_anchors(idx)
        records = [finish_step(p, out, rewards[i], dones[i], infos[i], expert, next_anchor, hidden_state=before,
                               next_hidden_state=after)
                   for i, p, out, expert, next_anchor, before, after
                   in zip(idx, prepared, outputs, experts, nexts, hidden, envs.hidden_state_of(idx))]
        return records, next_obs


def _get(section: Any, key: str) -> Any:
    if section is None:
        return None
    if isinstance(section, dict):
        return section.get(key)
    try:
        return section.get(key)  # DictConfig
    except AttributeError:
        return getattr(section, key, None)


def _groups(trajectories: Sequence[TrajectoryRecord]) -> list[list[TrajectoryRecord]]:
    """Trajectories grouped by uid, in first-seen order."""
    groups: dict[str, list[TrajectoryRecord]] = {}
    for t in trajectories:
        groups.setdefault(t.uid, []).append(t)
    return list(groups.values())

"""One environment episode for the verl agent loop, stepped off the asyncio event loop.

verl runs many agent loops as coroutines on one event loop per AgentLoopWorker. Environment calls are
synchronous (and ALFWorld resets take seconds), so every reset and step runs in a thread pool shared by the
worker process: a slow environment delays only its own episode, never generation for the others.

The episode is the project's own environment manager (agent_system) over one task with one copy, so prompts,
memory, action projection and anchors are exactly those of the embedded engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_system.environments.config import EnvConfig
from agent_system.environments.registry import get_env_manager_class

_EXECUTOR: ThreadPoolExecutor | None = None


def environment_executor() -> ThreadPoolExecutor:
    """The worker process's thread pool for environment calls (created on first use).

    Size: ``SLEA_RL_ENV_THREADS`` or 64; environment steps mostly wait on I/O or worker processes, and a
    thread per concurrently running episode keeps any one of them from queueing behind another.
    """
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(
            max_workers=int(os.environ.get("SLEA_RL_ENV_THREADS", "64")), thread_name_prefix="forge-env"
        )
    return _EXECUTOR


@dataclass
class EpisodeView:
    """What the policy and the library see at one step."""

    prompt: str  # the observation prompt (task, history, admissible actions)
    anchor_obs: str  # raw observation only: the retrieval query and the step-group key
    image: np.ndarray | None  # HxWx3 uint8 in image mode
    task: str
    task_type: str | None


@dataclass
class StepOutcome:
    reward: float
    done: bool
    is_action_valid: bool
    action: str
    won: bool
    failure_reason: str | None
    task_score: float | None = None  # info["task_score"] where the environment reports one (WebShop, AppWorld)


class EpisodeSession:
    """A single-environment manager (1 task x 1 copy) driven from a coroutine."""

    def __init__(self, env_config: EnvConfig, split: str, seed: int):
        single = dataclasses.replace(env_config, rollout=dataclasses.replace(env_config.rollout, n=1))
        self._manager_class = get_env_manager_class(env_config.env_name)
        self._config = single
        self._split = split
        self._seed = int(seed)
        self._manager = None
        self._view: EpisodeView | None = None
        self.done = False

    async def reset(self) -> EpisodeView:
        return await self._call(self._reset_sync)

    async def step(self, response_text: str) -> tuple[StepOutcome, EpisodeView]:
        return await self._call(self._step_sync, response_text)

    async def close(self) -> None:
        if self._manager is not None:
            await self._call(self._manager.close)

    @property
    def max_steps(self) -> int:
        return self._manager_class.resolve_max_steps(self._config)

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(environment_executor(), fn, *args)

    def _reset_sync(self) -> EpisodeView:
        self._manager = self._manager_class(self._config, num_tasks=1, split=self._split)
        obs, infos = self._manager.reset([self._seed])
        self.done = not bool(self._manager.active[0])
        self._view = self._make_view(obs, infos[0])
        return self._view

    def _step_sync(self, response_text: str) -> tuple[StepOutcome, EpisodeView]:
        obs, rewards, dones, infos = self._manager.step([response_text])
        info = infos[0]
        self.done = bool(dones[0])
        outcome = StepOutcome(
            reward=float(rewards[0]),
            done=self.done,
            is_action_valid=bool(info.get("is_action_valid", False)),
            action=str(info.get("action", "")),
            won=bool(self._manager.won[0]),
            failure_reason=self._manager.failure_reason[0],
            task_score=None if info.get("task_score") is None else float(info["task_score"]),
        )
        self._view = self._make_view(obs, info)
        return outcome, self._view

    def _make_view(self, obs: Any, info: dict) -> EpisodeView:
        return EpisodeView(
            prompt=obs.text[0],
            anchor_obs=obs.anchor[0],
            image=obs.image[0],
            task=str(info.get("task", "")),
            task_type=info.get("task_type"),
        )

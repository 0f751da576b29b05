"""One environment episode for the verl agent loop, stepped off the asyncio event loop.

verl runs many agent loops as coroutines on one event loop per AgentLoopWorker. Environment calls are
synchronous (and ALFWorld resets take seconds), so every reset and step runs in a thread pool shared by the
worker process: a slow environment delays only its own episode, never generation for the others.

The episode is the project's own environment manager (agent_system) over one task with one copy, so prompts,
memory, action projection and anchors are exactly those of the embedded engine. Managers come from the process's
:mod:`manager_pool` and go back to it when the episode closes, so heavy environments keep their worker process
from one episode to the next.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent_system.environments.config import EnvConfig
from agent_system.environments.registry import get_env_manager_class
from recipe.forge.engines.verl.manager_pool import ManagerPool, process_manager_pool

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
    """What the policy and the library see at one step, and the expert's action there (the manager's
    ``recorded_expert_actions``: only the step's record keeps it, neither the prompt nor retrieval sees it)."""

    prompt: str  # the observation prompt (task, history, admissible actions)
    anchor_obs: str  # raw observation only: the retrieval query and the step-group key
    image: np.ndarray | None  # HxWx3 uint8 in image mode
    task: str
    task_type: str | None
    admissible_actions: tuple[str, ...] = ()  # the actions the environment lists for this state
    expert_action: str | None = None  # the environment's expert action here (None: none, or the episode is over)
    hidden_state: str = ""  # what the observation leaves out of this state (the manager's hidden_state_of)


@dataclass
class StepOutcome:
    reward: float
    done: bool
    is_action_valid: bool
    action: str
    won: bool
    failure_reason: str | None
    task_score: float | None = None  # info["task_score"] where the environment reports one (WebShop, AppWorld)
    info: dict[str, Any] = field(default_factory=dict)  # the environment's step info (what finish_step reads)
    next_anchor_obs: str | None = None  # the observation the step led to; None: the environment ended the episode
    next_hidden_state: str = ""  # what that observation leaves out of the state the step led to


class EpisodeSession:
    """A single-environment manager (1 task x 1 copy) driven from a coroutine.

    The manager is taken from ``pool`` (default: the process's pool) at ``reset`` and returned at ``close``. It
    is retired instead when the episode went wrong: an environment call raised, the episode ended as failed
    (``failure_reason``: crashed or hung worker, environment exception), or a call is still running at close
    (the episode's coroutine was cancelled mid-call; the manager is closed once that call returns).
    """

    def __init__(self, env_config: EnvConfig, split: str, seed: int, pool: ManagerPool | None = None):
        single = dataclasses.replace(env_config, rollout=dataclasses.replace(env_config.rollout, n=1))
        self._manager_class = get_env_manager_class(env_config.env_name)
        self._config = single
        self._split = split
        self._seed = int(seed)
        self._pool = pool
        self._manager = None
        self._view: EpisodeView | None = None
        self._raised = False  # an environment call raised: the manager is not trusted again
        self._last_call: Future | None = None
        self.done = False

    async def reset(self) -> EpisodeView:
        return await self._call(self._reset_sync)

    async def step(self, response_text: str) -> tuple[StepOutcome, EpisodeView]:
        return await self._call(self._step_sync, response_text)

    async def close(self) -> None:
        """Give the manager back to the pool, or retire it (see the class docstring)."""
        running = self._last_call
        if running is not None and not running.done():
            # cancelled mid-call: the call still runs in its thread; retire the manager once it returns
            running.add_done_callback(lambda _: environment_executor().submit(self._give_back, False))
            return
        await self._call(self._give_back, True)

    @property
    def max_steps(self) -> int:
        return self._manager_class.resolve_max_steps(self._config)

    def _manager_pool(self) -> ManagerPool:
        return self._pool if self._pool is not None else process_manager_pool()

    async def _call(self, fn, *args):
        self._last_call = environment_executor().submit(self._guarded, fn, *args)
        return await asyncio.wrap_future(self._last_call)

    def _guarded(self, fn, *args):
        try:
            return fn(*args)
        except BaseException:
            self._raised = True
            raise

    def _give_back(self, trusted: bool) -> None:
        manager, self._manager = self._manager, None
        if manager is not None:
            reusable = trusted and not self._raised and manager.failure_reason[0] is None
            self._manager_pool().release(manager, reusable)

    def _reset_sync(self) -> EpisodeView:
        if self._manager is not None:
            raise RuntimeError("EpisodeSession.reset was called twice; one session runs one episode")
        self._manager = self._manager_pool().acquire(self._manager_class, self._config, self._split)
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
            info=info,
            next_anchor_obs=self._manager.next_anchors([0])[0],
            next_hidden_state=self._manager.hidden_state_of([0])[0],
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
            admissible_actions=obs.admissible[0],
            expert_action=self._manager.recorded_expert_actions([0])[0],
            hidden_state=self._manager.hidden_state_of([0])[0],
        )


def shutdown_environment_executor() -> None:
    """Stop the process's environment thread pool, if one was started (a test session's end)."""
    global _EXECUTOR
    if _EXECUTOR is not None:
        _EXECUTOR.shutdown(wait=True, cancel_futures=True)
        _EXECUTOR = None

"""FaultyEnv: a tiny counting environment that crashes, hangs or raises on request, to exercise the
worker pools' failure handling.

Observation "seed=S count=C"; every step adds 1 to the count and rewards 1. The episode is won after
``win_after`` steps. Action "crash" kills the process (os._exit), "hang" sleeps far past any timeout,
"raise" raises RuntimeError, "sleep S" sleeps S seconds and then steps, "unpicklable" steps and puts a lock
(which cannot be pickled) into ``info``, "image:KIND" steps with the image observation ``IMAGES[KIND]()`` in
``info`` (a good one and the malformed kinds); anything else is an ordinary step.
A negative seed makes ``reset`` raise.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import AgentEnv, EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.projection import ParsedAction
from agent_system.environments.prompts.common import PromptContext, answer_format, history_block, join_sections


IMAGES = {  # what an environment could put in info["image"]: one good frame and the malformed kinds
    "good": lambda: np.full((8, 8, 3), 7, dtype=np.uint8),
    "float": lambda: np.zeros((8, 8, 3)),
    "flat": lambda: np.zeros(192, dtype=np.uint8),
    "rgba": lambda: np.zeros((8, 8, 4), dtype=np.uint8),
    "empty": lambda: np.zeros((0, 8, 3), dtype=np.uint8),
    "wide": lambda: np.zeros((1, 20_000, 3), dtype=np.uint8),
    "huge": lambda: np.zeros((3_000, 3_000, 3), dtype=np.uint8),
    "object": lambda: np.array([[["x"] * 3] * 2] * 2, dtype=object),
    "text": lambda: "a picture of a box",
    "nested": lambda: [[[0, 0, 0]]],
}


class SlowToLoad:
    """A value that takes ``seconds`` to unpickle. In an EnvSpec's kwargs it slows a spawned worker's start-up
    (the spec reaches the worker pickled, before the worker serves anything), not the environment's build or steps."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __reduce__(self):
        return _load_slowly, (self.seconds,)


def _load_slowly(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class FaultyEnv(AgentEnv):
    def __init__(self, win_after: int = 3, hang_s: float = 3600.0, load_s: float = 0.0):
        """``load_s``: what a SlowToLoad in the spec unpickled to (how long the worker took to start); unused."""
        self.win_after = win_after
        self.hang_s = hang_s
        self.seed = -1
        self.count = 0

    def _obs(self) -> str:
        return f"seed={self.seed} count={self.count}"

    def _info(self) -> dict[str, Any]:
        return {"won": self.count >= self.win_after, "task": f"count to {self.win_after}", "task_type": "even" if self.seed % 2 == 0 else "odd", "pid": os.getpid()}

    def reset(self, seed: int):
        if seed < 0:
            raise ValueError(f"negative seed {seed}")
        self.seed, self.count = int(seed), 0
        return self._obs(), self._info()

    def step(self, action: str):
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(self.hang_s)
        if action == "raise":
            raise RuntimeError("asked to raise")
        if action.startswith("sleep "):
            time.sleep(float(action.split()[1]))
        self.count += 1
        info = self._info()
        if action == "unpicklable":
            info["lock"] = threading.Lock()
        if action.startswith("image:"):
            info["image"] = IMAGES[action.split(":", 1)[1]]()
        return self._obs(), 1.0, info["won"], False, info

    def expert_action(self) -> str:
        return "count"


class FaultyEnvironmentManager(EnvironmentManagerBase):
    """Manager for FaultyEnv in worker processes (heavy), so crashes and hangs hit real processes."""

    heavy = True
    has_task_types = True

    @staticmethod
    def prompt_builder(ctx: PromptContext) -> str:
        return join_sections(ctx.task, history_block(ctx), f"Now: {ctx.observation}", answer_format(ctx, "any word"))

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        return EnvSpec("agent_system.testing.faulty_env:FaultyEnv", {})

    def action_for_malformed(self, parsed: ParsedAction) -> str:
        return parsed.action

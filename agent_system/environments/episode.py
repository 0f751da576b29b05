"""One episode, as a pool runs it: the environment API (:class:`AgentEnv`), its picklable recipe (:class:`EnvSpec`)
and what a reset or step returns (:class:`StepResult`, :func:`failed_result` for an episode ended by
infrastructure). agent_system/environments/base.py says how to add an environment; the worker pools
(agent_system/workers) build and step episodes from these alone.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping


class AgentEnv(abc.ABC):
    """One seeded, deterministic episode with text observations and text actions (gymnasium-style)."""

    @abc.abstractmethod
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        """Start the episode chosen by ``seed``; returns (observation text, info)."""

    @abc.abstractmethod
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one action (text in the environment's action language; unknown text is an invalid move,
        never an exception); returns (observation, reward, terminated, truncated, info)."""

    def expert_action(self) -> str | None:
        """The action a scripted expert takes from the current state, or None when the environment has none."""
        return None

    def close(self) -> None:
        """Release resources (processes, files); the default has none."""


@dataclass(frozen=True)
class EnvSpec:
    """A picklable recipe for one environment: ``target`` is "module:Class", ``kwargs`` its constructor args."""

    target: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> AgentEnv:
        module_name, _, class_name = self.target.partition(":")
        if not class_name:
            raise ValueError(f"EnvSpec target {self.target!r} must be 'module:Class'")
        env_class = getattr(importlib.import_module(module_name), class_name)
        return env_class(**dict(self.kwargs))


@dataclass
class StepResult:
    """What one environment step (or reset, with reward 0 and not done) returns through a pool."""

    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def failed_result(reason: str, obs: str = "") -> StepResult:
    """The result recorded for an episode that ended because of infrastructure, not the policy."""
    return StepResult(obs=obs, reward=0.0, terminated=True, truncated=False, info={"won": False, "failure_reason": reason})

"""InProcessEnvPool: all environments live in this process and are stepped one after another."""

from __future__ import annotations

import traceback
from typing import Any, Sequence

from agent_system.environments.episode import AgentEnv, EnvSpec, StepResult, failed_result


def env_error_reason(exc: BaseException) -> str:
    return f"env error: {type(exc).__name__}: {exc}"


def run_reset(env: AgentEnv, seed: int) -> StepResult:
    try:
        obs, info = env.reset(seed=seed)
        return StepResult(obs=obs, reward=0.0, terminated=False, truncated=False, info=info)
    except Exception as exc:  # an environment bug ends this episode, not the batch
        return failed_result(env_error_reason(exc) + "\n" + traceback.format_exc(limit=3))


def run_step(env: AgentEnv, action: str) -> StepResult:
    try:
        obs, reward, terminated, truncated, info = env.step(action)
        return StepResult(obs=obs, reward=float(reward), terminated=bool(terminated), truncated=bool(truncated), info=info)
    except Exception as exc:
        return failed_result(env_error_reason(exc))


def run_call(env: AgentEnv, method: str) -> Any:
    try:
        return getattr(env, method)()
    except Exception:
        return None


class InProcessEnvPool:
    """``num_envs`` environments built from ``spec`` in this process (for environments cheap to step)."""

    def __init__(self, spec: EnvSpec, num_envs: int):
        self.spec = spec
        self.num_envs = num_envs
        self.envs = [spec.build() for _ in range(num_envs)]

    def reset(self, indices: Sequence[int], seeds: Sequence[int]) -> list[StepResult]:
        return [run_reset(self.envs[i], int(s)) for i, s in zip(indices, seeds)]

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        return [run_step(self.envs[i], a) for i, a in zip(indices, actions)]

    def call(self, method: str, indices: Sequence[int]) -> list[Any]:
        return [run_call(self.envs[i], method) for i in indices]

    def close(self) -> None:
        for env in self.envs:
            env.close()

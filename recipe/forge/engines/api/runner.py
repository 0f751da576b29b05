"""Prompt-only mode (``trainer.engine=api``): the training-free SLEA-RL baseline.

The same environments, rollout and library evolution as training, with no gradient updates: the policy is
any OpenAI-compatible chat endpoint (GPT-4o, a vLLM / SGLang / llama.cpp server, ...), called through the
``openai`` client (generator.py). The library learns from every batch; validation runs with and without it. The
loop is the embedded trainer's (recipe/forge/engines/fit_loop.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_system.config_checks import ConfigError, check_int, check_range
from recipe.forge.config_reader import ConfigReader

if TYPE_CHECKING:
    from recipe.forge.run_config import RunConfig


@dataclass(frozen=True)
class ApiSettings:
    """``trainer.api``: the chat endpoint and how it is called."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 60.0

    def __post_init__(self):
        if not str(self.base_url).startswith(("http://", "https://")):
            raise ConfigError(f"trainer.api.base_url={self.base_url!r} must be an http(s) URL")
        if not self.model:
            raise ConfigError("trainer.api.model must not be empty")
        check_int("trainer.api.max_concurrency", self.max_concurrency, 1)
        check_range("trainer.api.timeout_s", self.timeout_s, 0.0, low_inclusive=False)


def read_api_settings(reader: ConfigReader) -> ApiSettings:
    return ApiSettings(**reader.section("trainer.api", [f.name for f in dataclasses.fields(ApiSettings)]))


class PromptOnlyRunner:
    """Rollout + library evolution per iteration, no updates; validation with and without the library."""

    def __init__(self, run: RunConfig, client: Any | None = None):
        from agent_system.environments import make_envs
        from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
        from recipe.forge.engines.api.generator import OpenAIGenerator
        from recipe.forge.engines.local.rollout_dump import chat_prompt, rollout_dump
        from recipe.forge.experience import ExperienceSystem

        self.run = run
        self.generator = OpenAIGenerator(run.api, client)
        self.train_envs, self.val_envs = make_envs(run, val_copies=run.rollout.val_copies)
        self.collector = TrajectoryCollector(progress=run.local.progress)
        llm = self.generator.as_llm() if run.algorithm.forge.extractor == "llm" else None
        self.experience = ExperienceSystem.from_algorithm(run.algorithm, llm=llm)
        self.output_dir = Path(run.trainer.output_dir)
        self.iteration = 0  # iterations done: what a validation pass now runs after, and its dump's file name
        self.dump = rollout_dump(run.trainer.rollout_data_dir, chat_prompt)  # the endpoint is sent messages

    def train_iteration(self, iteration: int) -> dict[str, float]:
        """One batch rolled out with the library, then the library evolved from it."""
        from recipe.forge.engines.local.rollout_dump import shown_entries

        self.experience.begin_iteration(iteration)
        batch = self.collector.collect(self.train_envs, self.generator, self.run.rollout.sampling(),
                                       experience_provider=self.experience.provider)
        metrics = dict(batch.metrics)
        shown = shown_entries(batch.trajectories, self.experience.library) if self.dump is not None else {}
        metrics.update(self.experience.evolve(batch.trajectories, iteration))
        if self.dump is not None:
            self.dump.write(batch.trajectories, iteration + 1, shown)
        metrics["api/requests"] = float(self.generator.requests)  # requests sent so far, this run
        return metrics

    def validate(self) -> dict[str, float]:
        """``val/*`` with the library, ``val_no_library/*`` without it, and ``api/requests`` counted after them."""
        from recipe.forge.engines.local.validation import validation_metrics

        metrics = validation_metrics(self.collector, self.val_envs, self.generator, self.run.rollout.sampling(True),
                                     self.experience, dump=self.dump, iteration=self.iteration)
        return {**metrics, "api/requests": float(self.generator.requests)}

    def save(self, iteration: int) -> Path:
        """The library, the task sampler and the iteration, in the embedded trainer's checkpoint layout."""
        from recipe.forge.engines.local.checkpoint import save_checkpoint

        return save_checkpoint(self.output_dir, iteration, rng={"env_tasks": self.train_envs.task_rng},
                               experience=self.experience)

    def resume(self) -> int:
        """Iterations already done according to the resume mode (0 when starting fresh)."""
        from recipe.forge.engines.local.checkpoint import resume_from_checkpoint

        t = self.run.trainer
        return resume_from_checkpoint(self.output_dir, t.resume_mode, t.resume_from_path,
                                      rng={"env_tasks": self.train_envs.task_rng}, experience=self.experience)

    def fit(self) -> list[dict[str, float]]:
        """Run to ``trainer.total_training_steps`` iterations (fit_loop.fit); returns the logged metrics."""
        from recipe.forge.engines.fit_loop import fit

        return fit(self, self.run, "prompt-only iterations")

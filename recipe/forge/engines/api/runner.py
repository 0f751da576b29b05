"""Prompt-only mode (``trainer.engine=api``): the training-free SLEA-RL baseline.

The same environments, rollout and library evolution as training, with no gradient updates: the policy is
any OpenAI-compatible chat endpoint (GPT-4o, a vLLM / SGLang / llama.cpp server, ...), called through the
``openai`` client (generator.py). The library learns from every batch; validation runs with and without it. The
loop is the embedded trainer's (recipe/forge/runs/fit_loop.py).

Endpoint faults (generator.py, retry.py): passing ones are retried; when the endpoint stays unusable the run
saves the state after its last finished iteration (unless that checkpoint exists) and ends with EndpointError,
one line naming the endpoint and the last error; ``trainer.resume_mode=auto`` continues from there. An endpoint
that answers, but never with a valid action (the wrong model, a format it does not follow, garbage), ends the run
the same way at the end of the first iteration in which no reply held one; a later such iteration is a warning
line.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe.forge.engines.api.retry import EndpointError
from recipe.forge.engines.api.settings import ApiSettings

if TYPE_CHECKING:
    from recipe.forge.run_config import RunConfig


@dataclass(frozen=True)
class RestorePoint:
    """The state after ``iteration`` finished iterations, taken before the next one touches it: what the run
    saves when the endpoint fails in the middle of an iteration."""

    iteration: int
    experience: dict[str, Any]  # ExperienceSystem.state()
    task_rng: Any  # a copy of the training task sampler

    def save(self, directory: str | Path) -> Path:
        """Written like ExperienceSystem.save (the checkpoint's ``library`` folder)."""
        from recipe.forge.experience.store import save_payload

        return save_payload(directory, self.experience)


class PromptOnlyRunner:
    """Rollout + library evolution per iteration, no updates; validation with and without the library."""

    def __init__(self, run: RunConfig, client: Any | None = None):
        from agent_system.environments import make_envs
        from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
        from recipe.forge.engines.api.generator import OpenAIGenerator
        from recipe.forge.runs.rollout_dump import chat_prompt, rollout_dump
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
        self.restore_point: RestorePoint | None = None
        self.valid_replies = 0  # replies of this process's training iterations that held a valid action

    def counters(self) -> dict[str, float]:
        """``api/requests``, ``api/retries`` and ``api/malformed_replies`` so far, this run."""
        g = self.generator
        return {"api/requests": float(g.requests), "api/retries": float(g.retrier.retries),
                "api/malformed_replies": float(g.malformed)}

    def train_iteration(self, iteration: int) -> dict[str, float]:
        """One batch rolled out with the library, then the library evolved from it."""
        from recipe.forge.runs.rollout_dump import shown_entries

        self.restore_point = RestorePoint(iteration, self.experience.state(), copy.deepcopy(self.train_envs.task_rng))
        self.experience.begin_iteration(iteration)
        unparsed = self.generator.malformed
        batch = self.collector.collect(self.train_envs, self.generator, self.run.rollout.sampling(),
                                       experience_provider=self.experience.provider)
        self.check_replies(batch, iteration + 1, self.generator.malformed - unparsed)
        metrics = dict(batch.metrics)
        shown = shown_entries(batch.trajectories, self.experience.library) if self.dump is not None else {}
        metrics.update(self.experience.evolve(batch.trajectories, iteration))
        if self.dump is not None:
            self.dump.write(batch.trajectories, iteration + 1, shown)
        metrics.update(self.counters())
        return metrics

    def check_replies(self, batch, iteration: int, unparsed: int) -> None:
        """Say so when no reply of an iteration held a valid action; end the run (EndpointError, its state before
        the iteration saved) when no reply of the run ever did: the endpoint answers, but nothing it answers can
        be played, and a prompt-only run never learns its way out of that."""
        from tqdm.auto import tqdm

        steps = [step for trajectory in batch.trajectories for step in trajectory.steps]
        valid = sum(bool(step.is_action_valid) for step in steps)
        self.valid_replies += valid
        if valid or not steps:
            return
        api = self.run.api
        what = (f"none of the {len(steps)} replies of {api.model} at {api.base_url} in iteration {iteration} held a "
                f"valid action ({unparsed} were not even a chat completion)")
        if self.valid_replies == 0:
            raise EndpointError(f"{what}, nor any earlier reply of this run: check trainer.api.model and that the model answers "
                                "in the environment's <action>...</action> format")
        tqdm.write(f"warning: {what}")

    def validate(self) -> dict[str, float]:
        """``val/*`` with the library, ``val_no_library/*`` without it, and the ``api/*`` counters after them."""
        from recipe.forge.runs.validation import validation_metrics

        metrics = validation_metrics(self.collector, self.val_envs, self.generator, self.run.rollout.sampling(True),
                                     self.experience, dump=self.dump, iteration=self.iteration)
        return {**metrics, **self.counters()}

    def save(self, iteration: int) -> Path:
        """The library, the task sampler and the iteration, in the embedded trainer's checkpoint layout."""
        from recipe.forge.runs.checkpoint import save_checkpoint

        return save_checkpoint(self.output_dir, iteration, rng={"env_tasks": self.train_envs.task_rng},
                               experience=self.experience)

    def resume(self) -> int:
        """Iterations already done according to the resume mode (0 when starting fresh)."""
        from recipe.forge.runs.checkpoint import resume_from_checkpoint

        t = self.run.trainer
        return resume_from_checkpoint(self.output_dir, t.resume_mode, t.resume_from_path,
                                      rng={"env_tasks": self.train_envs.task_rng}, experience=self.experience)

    def save_restore_point(self) -> str:
        """Save the state after the last finished iteration unless its checkpoint exists; says what was kept."""
        from recipe.forge.runs.checkpoint import checkpoint_dir, is_complete, save_checkpoint

        point = self.restore_point
        if point is None or point.iteration == 0:
            return "no iteration had finished: nothing to save"
        path = checkpoint_dir(self.output_dir, point.iteration)
        if not is_complete(path):
            save_checkpoint(self.output_dir, point.iteration, rng={"env_tasks": point.task_rng}, experience=point)
        return f"the checkpoint {path} holds the run up to iteration {point.iteration} (trainer.resume_mode=auto resumes from it)"

    def fit(self, plan=None) -> list[dict[str, float]]:
        """Run to ``trainer.total_training_steps`` iterations (fit_loop.fit); returns the logged metrics. An
        endpoint that stays unusable ends the run with EndpointError after save_restore_point."""
        from recipe.forge.runs.fit_loop import fit

        try:
            return fit(self, self.run, "prompt-only iterations", plan)
        except EndpointError as exc:
            raise EndpointError(f"{exc}; {self.save_restore_point()}") from None

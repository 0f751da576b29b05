"""Prompt-only mode (``trainer.engine=api``): the training-free SLEA-RL baseline.

The same environments, rollout and library evolution as training, with no gradient updates: the policy is
any OpenAI-compatible chat endpoint (GPT-4o, a vLLM / SGLang / llama.cpp server, ...), called through the
``openai`` client. The library learns from every batch; validation runs with and without it.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from agent_system.config_checks import ConfigError, check_int, check_range
from agent_system.environments.projection import valid_unicode
from agent_system.multi_turn_rollout.protocols import GenerationOutput, Message, SamplingParams

if TYPE_CHECKING:
    from recipe.forge.config_schema import ValidatedConfig


@dataclass
class ApiSettings:
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 60.0


def api_settings(cfg: DictConfig) -> ApiSettings:
    section = OmegaConf.to_container(OmegaConf.select(cfg, "trainer.api", default={}) or {}, resolve=True)
    known = set(ApiSettings.__dataclass_fields__)
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"unknown key trainer.api.{unknown[0]}; known keys: {sorted(known)}")
    s = ApiSettings(**section)
    if not str(s.base_url).startswith(("http://", "https://")):
        raise ConfigError(f"trainer.api.base_url={s.base_url!r} must be an http(s) URL")
    if not s.model:
        raise ConfigError("trainer.api.model must not be empty")
    check_int("trainer.api.max_concurrency", s.max_concurrency, 1)
    check_range("trainer.api.timeout_s", s.timeout_s, 0.0, low_inclusive=False)
    return s


def _text_only(message: Message) -> dict[str, str]:
    """Chat APIs take text content here; image parts of multimodal prompts are dropped."""
    content = message["content"]
    if isinstance(content, list):
        content = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    return {"role": message["role"], "content": content}


class OpenAIGenerator:
    """The rollout's ``Generator`` over an OpenAI-compatible chat endpoint (concurrent requests).

    Chat APIs cut the stop string off the reply; when a reply stopped on it (the server's ``stop_reason``
    where it reports one, as vLLM and SGLang do; else an ``<action>`` left open by a "stop" finish), the
    stop string is put back so that the action parser sees the closed tag, exactly as with local
    generation. Token ids and log-probs are not available (empty lists): nothing is trained on them.
    """

    def __init__(self, settings: ApiSettings, client: Any | None = None):
        from openai import OpenAI

        self.settings = settings
        self.client = client or OpenAI(base_url=settings.base_url, api_key=os.environ.get(settings.api_key_env, "EMPTY"),
                                       timeout=settings.timeout_s, max_retries=2)
        self.pool = ThreadPoolExecutor(max_workers=settings.max_concurrency)
        self.requests = 0

    def _one(self, messages: list[Message], sampling: SamplingParams) -> GenerationOutput:
        greedy = not sampling.do_sample or sampling.temperature <= 0
        reply = self.client.chat.completions.create(
            model=self.settings.model,
            messages=[_text_only(m) for m in messages],
            temperature=0.0 if greedy else sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
        )
        choice = reply.choices[0]
        text = valid_unicode(choice.message.content)
        extra = getattr(choice, "model_extra", None) or {}
        for stop in sampling.stop:
            if "stop_reason" in extra:  # vLLM / SGLang name the stop string that matched (None for EOS)
                cut = extra["stop_reason"] == stop
            else:  # plain OpenAI: an <action> left open by a "stop" finish was closed by the stop string
                cut = choice.finish_reason == "stop" and text.rfind(stop.replace("</", "<", 1)) > text.rfind(stop)
            if cut:
                text += stop
        return GenerationOutput(text=text, prompt_ids=[], response_ids=[], logprobs=[])

    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams) -> list[GenerationOutput]:
        self.requests += len(messages)
        return list(self.pool.map(lambda m: self._one(m, sampling), messages))

    def as_llm(self, max_tokens: int = 512):
        """``llm(prompt) -> str`` for the LLM experience extractor, on the same endpoint."""
        sampling = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=max_tokens, stop=())
        return lambda prompt: self._one([{"role": "user", "content": prompt}], sampling).text


class PromptOnlyRunner:
    """Rollout + library evolution per iteration, no updates; validation with and without the library."""

    def __init__(self, cfg: DictConfig, validated: ValidatedConfig, client: Any | None = None):
        from agent_system.environments import make_envs
        from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
        from recipe.forge.engines.local.rollout_dump import chat_prompt, rollout_dump
        from recipe.forge.engines.local.settings import engine_settings
        from recipe.forge.experience import ExperienceSystem

        self.cfg = cfg
        self.algorithm = validated.algorithm
        self.settings = engine_settings(cfg)
        self.api = api_settings(cfg)
        self.generator = OpenAIGenerator(self.api, client)
        self.train_envs, self.val_envs = make_envs(cfg)
        self.collector = TrajectoryCollector(progress=self.settings.local.progress)
        llm = self.generator.as_llm() if self.algorithm.forge.extractor == "llm" else None
        self.experience = ExperienceSystem.from_algorithm(self.algorithm, llm=llm)
        self.output_dir = Path(self.settings.output_dir)
        self.iteration = 0  # iterations done: what a validation pass now runs after, and its dump's file name
        self.dump = rollout_dump(self.settings.rollout_data_dir, chat_prompt)  # the endpoint is sent messages

    def sampling(self, validation: bool = False) -> SamplingParams:
        s = self.settings
        temperature = s.val_temperature if validation else s.temperature
        return SamplingParams(temperature=temperature, top_p=1.0 if validation else s.top_p,
                              max_new_tokens=s.max_new_tokens, stop=("</action>",), do_sample=temperature > 0)

    def validate(self) -> dict[str, float]:
        from recipe.forge.engines.local.validation import validation_metrics

        return validation_metrics(self.collector, self.val_envs, self.generator, self.sampling(True), self.experience,
                                  dump=self.dump, iteration=self.iteration)

    def _save(self, iteration: int) -> None:
        """The library, the task sampler and the iteration, in the embedded trainer's checkpoint layout."""
        from recipe.forge.engines.local.checkpoint import save_checkpoint

        save_checkpoint(self.output_dir, iteration, rng={"env_tasks": self.train_envs.task_rng},
                        experience=self.experience)

    def _resume(self) -> int:
        from recipe.forge.engines.local.checkpoint import checkpoint_to_resume, load_checkpoint

        s = self.settings
        path = checkpoint_to_resume(self.output_dir, s.resume_mode, s.resume_from_path)
        if path is None:
            return 0
        state = load_checkpoint(path, rng={"env_tasks": self.train_envs.task_rng}, experience=self.experience)
        return int(state["iteration"])

    def fit(self) -> list[dict[str, float]]:
        from recipe.forge.engines.local.rollout_dump import shown_entries
        from recipe.forge.engines.local.settings import is_due
        from recipe.forge.engines.local.tracking import MetricsTracker

        s = self.settings
        start = self.iteration = self._resume()
        if s.val_only:
            from recipe.forge.engines.local.validation import evaluate_only

            return evaluate_only(s, start, self.validate)
        tracker = MetricsTracker(self.output_dir, s.loggers, s.project_name, s.experiment_name,
                                 resume_after=start if start > 0 else None)
        history = []
        for iteration in tqdm(range(start, s.total_iterations), desc="prompt-only iterations",
                              disable=not s.local.progress):
            started = time.perf_counter()
            self.experience.begin_iteration(iteration)
            batch = self.collector.collect(self.train_envs, self.generator, self.sampling(),
                                           experience_provider=self.experience.provider)
            metrics = dict(batch.metrics)
            shown = shown_entries(batch.trajectories, self.experience.library) if self.dump is not None else {}
            metrics.update(self.experience.evolve(batch.trajectories, iteration))
            done = self.iteration = iteration + 1
            if self.dump is not None:
                self.dump.write(batch.trajectories, done, shown)
            if is_due(done, s.test_freq, s.total_iterations):
                metrics.update(self.validate())
            metrics["timing_s/step"] = time.perf_counter() - started
            metrics["api/requests"] = float(self.generator.requests)
            tracker.log(done, metrics)
            history.append({"iteration": done, **metrics})
            if is_due(done, s.save_freq, s.total_iterations):
                self._save(done)
        tracker.close()
        return history

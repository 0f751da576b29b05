"""``forge_agent``: verl's AgentLoopBase running one SLEA-RL episode per ``run()``.

Per step, through the step path both engines share (agent_system/multi_turn_rollout/step.py): the library (the
snapshot the task group started with: library_channel.WorkerLibrary.acquire) retrieves experiences for the raw
observation and the messages are built
(``prepare_steps``); they are tokenised with verl's Continuous Token builder and verl's server manager generates;
the response is projected and applied to the environment in a thread pool, and ``finish_step`` makes the step's
StepRecord, which the row codec (row_codec.py) writes into the training row's extra_fields. The record keeps the
policy versions that generated the step (verl's server client reports them; in the async modes a response
resumed across a weight update spans two) and the library version it was shown. The run's typed config is built
once per worker process (process_config.py).

``run()`` returns one AgentLoopOutput per step; verl stores each as its own training row. Two verl 0.9.1
behaviours shape the output:

* verl copies the LAST element's ``reward_score`` onto every row, so every row carries the same episode return
  as reward_score and the per-step data lives in ``extra_fields`` (row_codec.row_from_record);
* rows without ``extra_fields["reward_extra_info"]`` never reach the batch, so every row has one (episode
  outcome scalars, which verl's validation also aggregates).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Sequence
from uuid import uuid4

from PIL import Image
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from agent_system.multi_turn_rollout.protocols import (ACTION_STOP, GenerationOutput, StepExperience, StepQuery,
                                                       StepRecord, TrajectoryRecord)
from agent_system.multi_turn_rollout.prompt_fit import fit_prompt, shorter_versions
from agent_system.multi_turn_rollout.step import PreparedStep, finish_step, prepare_steps, report_shown, response_text
from recipe.forge.distillation import distilled_step
from recipe.forge.hf.vision_inputs import message_images
from recipe.forge.engines.verl.episode import EpisodeSession, EpisodeView, StepOutcome
from recipe.forge.engines.verl.library_channel import worker_library
from recipe.forge.engines.verl.process_config import process_run_config
from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record

AGENT_NAME = "forge_agent"
AGENT_WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this agent-loop worker process, written into its rows
KEEP_STOP_STRING = {"sglang": "no_stop_trim"}  # backend -> its name of "keep the stop string"; others: vLLM's


def with_action_stop(sampling_params: dict[str, Any], backend: str) -> dict[str, Any]:
    """verl's sampling parameters plus the ``</action>`` stop string, merged with any stop strings already given,
    and kept in the output (the projection needs the closing tag), in the rollout ``backend``'s own words."""
    stop = sampling_params.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    keep = KEEP_STOP_STRING.get(backend, "include_stop_str_in_output")
    return {**sampling_params, "stop": list(dict.fromkeys([*stop, *ACTION_STOP])), keep: True}


def view_image(view: EpisodeView) -> Image.Image | None:
    """The step's image as verl's processor takes it (a PIL image), None in text mode."""
    return Image.fromarray(view.image) if view.image is not None else None


def prompt_images(messages: list[dict[str, Any]]) -> list[Image.Image] | None:
    """The images of the chat's image parts, in order, as PIL images (None without any): the observations as the
    environment rendered them, which the processor resizes, as the embedded engine gives them to it. (verl's own
    ``process_multi_modal_info`` would resize them first, with qwen_vl_utils, which also needs torchvision.)"""
    images = [image if isinstance(image, Image.Image) else Image.fromarray(image) for image in message_images(messages)]
    return images or None


@dataclass
class ServerGeneration:
    """One response from verl's server manager: the generation, and what the training row needs besides it."""

    output: GenerationOutput
    has_logprobs: bool  # the server returned log-probs (the row then carries them)
    multi_modal_data: dict[str, Any] | None
    server_fields: dict[str, Any]  # the server's extra fields (the policy versions that generated it)


@dataclass
class EpisodeStep:
    """One step of the episode: its StepRecord and what its training row carries besides."""

    record: StepRecord
    experience: StepExperience
    view: EpisodeView  # the view the step was taken in (prompt, task)
    outcome: StepOutcome
    generation: ServerGeneration
    gen_seconds: float
    student_prompt_ids: list[int] | None  # the plain prompt's ids (self-distillation), None otherwise


@register(AGENT_NAME)
class ForgeAgentLoop(AgentLoopBase):
    """One environment episode = one ``run()`` = one training row per step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        run = process_run_config(self.config)  # typed once per worker process
        self.env_config = run.env
        self.response_length = int(self.rollout_config.response_length)
        # self-distillation: rows also carry the plain (student) prompt of every step that had experiences
        self.distill = bool(run.algorithm.forge.use_distillation)
        # the prefilled start of every response (a format aid for tiny models), as on the embedded engine: part of
        # the prompt ids, and of the text the environment sees
        self.response_prefix = run.verl.response_prefix
        self.prefix_ids = self.tokenizer.encode(self.response_prefix, add_special_tokens=False) if self.response_prefix else []

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        extra_info = dict(kwargs.get("extra_info") or {})
        if "seed" not in extra_info:
            raise ValueError("forge_agent rows need extra_info.seed (the task seed); build data with run_verl")
        split = str(extra_info.get("split", "train"))
        uid = str(kwargs.get("uid", uuid4().hex))
        traj_uid = f"{uid}-{int(kwargs.get('session_id', 0))}"
        sampling_params = with_action_stop(sampling_params, str(self.rollout_config.name))
        library = worker_library(split)
        _, provider = await library.acquire(uid, self.tokenizer)  # the task group's snapshot, for all its copies
        try:
            return await self._episode(uid, traj_uid, split, int(extra_info["seed"]), sampling_params, provider)
        finally:
            library.release(uid)

    async def _episode(self, uid: str, traj_uid: str, split: str, seed: int, sampling_params: dict[str, Any],
                       provider: Any) -> list[AgentLoopOutput]:
        session = EpisodeSession(self.env_config, split, seed)
        env_seconds = time.perf_counter()
        view = await session.reset()
        env_seconds = time.perf_counter() - env_seconds
        steps: list[EpisodeStep] = []
        try:
            while not session.done and len(steps) < session.max_steps:
                query = StepQuery(anchor_obs=view.anchor_obs, task=view.task, task_type=view.task_type, uid=uid,
                                  traj_uid=traj_uid, step=len(steps), admissible_actions=view.admissible_actions)
                [prepared] = prepare_steps([query], [view.prompt], [view_image(view)], provider)
                prepared = await self._fit_prompt(prepared, view)
                report_shown(provider, [prepared])
                started = time.perf_counter()
                generation = await self._generate(prepared.messages, sampling_params)
                gen_seconds = time.perf_counter() - started
                # self-distillation: the row keeps the context the policy acted in (PPO stays on-policy); the
                # plain prompt is the student's view, scored by the trainer against this row's (teacher) context
                student_prompt_ids = None
                if self.distill and distilled_step(prepared.messages, prepared.plain_messages):
                    student_prompt_ids = [*await self.ct_build_initial_tokens(prepared.plain_messages), *self.prefix_ids]
                started = time.perf_counter()
                outcome, next_view = await session.step(response_text(generation.output))
                env_seconds += time.perf_counter() - started
                record = finish_step(prepared, generation.output, outcome.reward, outcome.done, outcome.info,
                                     view.expert_action, outcome.next_anchor_obs, hidden_state=view.hidden_state,
                                     next_hidden_state=outcome.next_hidden_state)
                steps.append(EpisodeStep(record, prepared.experience, view, outcome, generation, gen_seconds,
                                         student_prompt_ids))
                view = next_view
        finally:
            await session.close()
        return episode_outputs(steps, env_seconds, self.tokenizer.eos_token_id)

    # ------------------------------------------------------------------ steps
    async def _fit_prompt(self, prepared: PreparedStep, view: EpisodeView) -> PreparedStep:
        """The prompt-length rule both engines follow (prompt_fit.py), counted with verl's own tokenisation, so
        that verl never left-truncates a prompt: experiences give way first."""
        versions = shorter_versions(prepared, view.prompt, view_image(view))
        lengths = [await self._prompt_length(version.messages) for version in versions]
        return fit_prompt(versions, lengths, int(self.rollout_config.prompt_length))

    async def _prompt_length(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of the prompt :meth:`_generate` sends the server for ``messages`` (images and prefix included),
        counted with verl's token builder before verl's own cap (``ct_build_initial_tokens`` left-truncates)."""
        images = prompt_images(messages)
        build = self.continuous_token_builder.build_initial_tokens
        ids = await self.loop.run_in_executor(None, lambda: build(messages, images=images))
        return len(ids) + len(self.prefix_ids)

    async def _generate(self, messages: list[dict[str, Any]], sampling_params: dict[str, Any]) -> ServerGeneration:
        if self.processor is None and not isinstance(messages[-1]["content"], str):
            raise ValueError(
                f"env {self.env_config.env_name!r} gives image observations (mode=rgb_array) but "
                "actor_rollout_ref.model.path has no multimodal processor: use a vision-language model or mode=text"
            )
        images = prompt_images(messages)
        multi_modal_data = {"images": images} if images else {}
        self._assert_mm_supported(bool(multi_modal_data))
        prompt_ids = list(await self.ct_build_initial_tokens(messages, images=images)) + self.prefix_ids
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params, image_data=images
        )
        response_ids = list(output.token_ids[: self.response_length])
        logprobs = list(output.log_probs[: self.response_length]) if output.log_probs else []
        text = self.response_prefix + self.tokenizer.decode(response_ids, skip_special_tokens=True)
        return ServerGeneration(
            output=GenerationOutput(text=text, prompt_ids=prompt_ids, response_ids=response_ids, logprobs=logprobs,
                                    policy_versions=policy_versions(output.extra_fields)),
            has_logprobs=bool(output.log_probs),
            multi_modal_data=multi_modal_data or None,
            server_fields=dict(output.extra_fields),
        )

    # ---------------------------------------------------------------- outputs

def episode_trajectory(steps: Sequence[EpisodeStep]) -> TrajectoryRecord:
    """The TrajectoryRecord of an episode's steps (at least one): task and outcome as the last step left them,
    the failure reason of the first step that had one."""
    records = [s.record for s in steps]
    last = steps[-1]
    return TrajectoryRecord(
        uid=records[0].uid,
        traj_uid=records[0].traj_uid,
        task=last.view.task,
        task_type=last.view.task_type,
        steps=records,
        episode_reward=float(sum(r.reward for r in records)),
        success=bool(last.outcome.won),
        length=len(records),
        failure_reason=next((s.outcome.failure_reason for s in steps if s.outcome.failure_reason), None),
    )


def outcome_info(trajectory: TrajectoryRecord, task_score: float | None) -> dict[str, float]:
    """The episode's ``reward_extra_info`` (verl's validation aggregates every key): return, success, length and
    valid-action ratio, and ``task_score`` (WebShop / AppWorld's graded outcome) where the environment gives one."""
    info = {
        "episode_return": float(trajectory.episode_reward),
        "success": float(trajectory.success),
        "episode_length": float(trajectory.length),
        "valid_action_ratio": float(sum(r.is_action_valid for r in trajectory.steps) / max(trajectory.length, 1)),
    }
    if task_score is not None:
        info["task_score"] = float(task_score)
    return info


def policy_versions(server_fields: dict[str, Any]) -> tuple[int, int] | None:
    """(first, last) weights version that generated a response, from the fields verl's server client returns
    (``min_global_steps`` / ``max_global_steps``, which its async client keeps across a resumed request; the
    server's ``global_steps`` otherwise); None where the server does not say."""
    last = server_fields.get("max_global_steps", server_fields.get("global_steps"))
    first = server_fields.get("min_global_steps", last)
    if first is None or last is None:
        return None
    return int(first), int(last)


def episode_outputs(steps: Sequence[EpisodeStep], env_seconds: float, eos_token_id: int) -> list[AgentLoopOutput]:
    """One AgentLoopOutput per step of an episode (none for no steps): the step's tokens in verl's fields, its
    StepRecord (with the versions it was generated with), episode and extras in ``extra_fields``
    (row_codec.row_from_record), every row with the episode's outcome as reward_score and reward_extra_info (the
    last step's task score), and verl's staleness fields (the policy versions that generated the step);
    ``env_seconds``: the episode's time in the environment; an empty generation becomes one masked
    ``eos_token_id``."""
    if not steps:
        return []
    trajectory = episode_trajectory(steps)
    info = outcome_info(trajectory, steps[-1].outcome.task_score)
    outputs = []
    for s in steps:
        record = s.record
        response_ids = record.response_ids
        logprobs = record.logprobs if s.generation.has_logprobs else None
        mask = [1] * len(response_ids)
        if not response_ids:
            # An empty generation still is a step of the episode; one masked EOS keeps the row well formed.
            response_ids, mask = [eos_token_id], [0]
            logprobs = [0.0] if logprobs is not None else None
        server_fields = s.generation.server_fields
        extras = StepExtras(s.experience.text, s.student_prompt_ids,
                            agent_worker=AGENT_WORKER, rollout_server=str(server_fields.get("rollout_server") or ""))
        extra = {
            **row_from_record(record, trajectory, extras),
            "reward_extra_info": dict(info),
            # verl's staleness figures of the row (its tags): the policy versions that generated this step
            "min_global_steps": record.policy_version,
            "max_global_steps": record.policy_version_last,
        }
        outputs.append(
            AgentLoopOutput(
                prompt_ids=record.prompt_ids,
                response_ids=response_ids,
                response_mask=mask,
                response_logprobs=logprobs,
                multi_modal_data=s.generation.multi_modal_data,
                reward_score=trajectory.episode_reward,
                num_turns=2,
                metrics=AgentLoopMetrics(generate_sequences=s.gen_seconds, tool_calls=env_seconds / len(steps)),
                extra_fields=extra,
            )
        )
    return outputs

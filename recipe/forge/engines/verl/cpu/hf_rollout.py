"""``actor_rollout_ref.rollout.name=hf``: a rollout server on Hugging Face transformers, for verl on a CPU.

verl 0.9.1 ships rollout servers for vLLM, SGLang and TensorRT-LLM only, all GPU-bound. This backend has the
same three parts as verl's own:

* :class:`HFRolloutServer`, a Ray actor holding the policy's weights and answering verl's token-in/token-out
  ``generate`` calls. Concurrent requests (verl runs every episode of a worker as a coroutine) are gathered
  into batches and decoded together by the embedded engine's :class:`HFGenerator` (KV cache, stop strings,
  top-k/top-p), which returns the log-prob of each sampled token as ``log_softmax(logits / temperature)``:
  the quantity verl's actor recomputes, so rollout and actor log-probs agree up to float error. Partial
  rollouts (verl's async trainer modes) work as on verl's vLLM server: ``abort_all_requests`` closes the server's
  gate and stops the batch being decoded after its current token, each of its requests returning the tokens so far
  with ``stop_reason="aborted"`` (verl's FullyAsyncLLMServerClient resumes them from prompt + those tokens); a
  request that arrives behind the closed gate waits until ``resume_generation`` (or, with ``reject_request``, is
  answered "aborted" at once with no tokens). A
  vision-language policy (Qwen2.5-VL, Qwen3-VL) loads as the embedded engine loads it, with its processor; a
  request's ``image_data`` (the PIL images verl's agent loop processed into the prompt's pad tokens) goes through
  the same image processor and is decoded with the model's 3-D rotary positions, as the embedded engine decodes;
* :class:`HFReplica`, registered in verl's public ``RolloutReplicaRegistry``, which starts one server per
  replica in hybrid mode (the actor workers are the replica's workers);
* :class:`HFServerAdapter`, the in-worker ``BaseRollout`` the actor pushes weights through after each update:
  every rank reads the whole weight generator (materialising an FSDP2 shard is a collective), rank 0 of the
  replica sends the full tensors to its server. A standalone replica (verl's separate_async mode) has its own
  worker, verl's CheckpointEngineWorker, whose adapter receives the weights from a checkpoint engine (on a CPU the
  object store, cpu/object_store_engine.py) and sends them to the server the same way.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Optional

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from agent_system.multi_turn_rollout.protocols import SamplingParams
from recipe.forge.hf.vision_inputs import ImagePrompts, PromptImages
from recipe.forge.engines.verl.cpu.verl_private import register_rollout_adapter

ROLLOUT_NAME = "hf"
UNSUPPORTED_SAMPLING = {"repetition_penalty": 1.0, "n": 1}  # key -> the only value this server honours


def server_name(replica_rank: int) -> str:
    return f"slea_rl_hf_server_{replica_rank}"


def sampling_from_request(params: dict[str, Any], default_max_tokens: int) -> SamplingParams:
    """verl's / vLLM's sampling dict as the HF generator's SamplingParams (temperature 0 = greedy)."""
    for key, only in UNSUPPORTED_SAMPLING.items():
        if key in params and params[key] is not None and float(params[key]) != only:
            raise ValueError(f"the hf rollout server supports {key}={only} only, got {params[key]!r}")
    temperature = float(params.get("temperature", 1.0))
    max_tokens = params.get("max_tokens", params.get("max_new_tokens")) or default_max_tokens
    stop = params.get("stop") or ()
    return SamplingParams(
        temperature=temperature,
        top_p=float(params.get("top_p", 1.0)),
        top_k=int(params.get("top_k", -1) if params.get("top_k") is not None else -1),
        max_new_tokens=int(max_tokens),
        stop=tuple([stop] if isinstance(stop, str) else stop),
        do_sample=temperature > 0,
    )


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    images: Optional[PromptImages]  # the prompt's processed images, None for a text prompt
    done: asyncio.Future = field(repr=False)


class HFRolloutServer:
    """One rollout server: the policy's weights and a batching HF decoder (a Ray actor, see :class:`HFReplica`).

    Args:
        model_path: HF folder of the policy (the actor's initial weights; later weights arrive by update_weights).
        response_length: default max new tokens per request (verl's rollout.response_length).
        max_batch_size: requests decoded together at most.
        seed: seed of the sampling RNG.
        num_threads: torch threads of this process (0: torch's default).
        name: the server's name, returned with every generation (``rollout_server``), which the rows record.
    """

    def __init__(self, model_path: str, response_length: int, max_batch_size: int = 64, seed: int = 0,
                 num_threads: int = 0, name: str = ""):
        from recipe.forge.hf.generation import HFGenerator
        from recipe.forge.hf.model_loading import PolicyConfig, build_policy

        if num_threads:
            torch.set_num_threads(num_threads)
        policy = build_policy(PolicyConfig(path=str(model_path), dtype="fp32", use_reference=False))
        self.model = policy.model.eval()
        self.image_prompts = None if policy.processor is None else ImagePrompts(policy.processor)
        self.generator = HFGenerator(self.model, policy.tokenizer, batch_size=max_batch_size,
                                     generator=torch.Generator().manual_seed(int(seed)))
        self.response_length = int(response_length)
        self.max_batch_size = int(max_batch_size)
        self.global_steps: Optional[int] = None
        self.weight_version = 0
        self.name = str(name)
        self._pending: list[_Request] = []
        self._worker: Optional[asyncio.Task] = None
        self._gate: Optional[asyncio.Event] = None  # set: requests are admitted (made on the actor's event loop)
        self._rejecting = False  # the closed gate answers late requests "aborted" instead of holding them
        self._interrupt = threading.Event()  # asked by the decoding thread before every token
        self._busy_seconds = 0.0  # wall time spent decoding, all batches

    # ----------------------------------------------------------------- generation
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str = "",
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        if video_data:
            raise ValueError("the hf rollout server takes images, not videos")
        sampling = sampling_from_request(dict(sampling_params), self.response_length)
        images = self._prompt_images(image_data, prompt_ids) if image_data else None
        gate = self._admission_gate()
        while not gate.is_set():
            if self._rejecting:
                return self._token_output([], None, "aborted")
            await gate.wait()
        request = _Request(list(prompt_ids), sampling, images, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        output = await request.done
        if output is None:  # aborted before its batch started
            return self._token_output([], None, "aborted")
        return self._token_output(output.response_ids, output.logprobs,
                                  "aborted" if output.interrupted else "completed")

    def _token_output(self, token_ids: list[int], log_probs: Optional[list[float]], stop_reason: str) -> TokenOutput:
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason=stop_reason,
                           extra_fields={"global_steps": self.global_steps, "rollout_server": self.name})

    def _admission_gate(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        return self._gate

    def _prompt_images(self, image_data: list[Any], prompt_ids: list[int]) -> PromptImages:
        """The request's images processed for its prompt (whose pad tokens they must fill)."""
        if self.image_prompts is None:
            raise ValueError("a request with image_data, but the rollout model has no image processor "
                             "(actor_rollout_ref.model.path is a text-only model)")
        return self.image_prompts.process(image_data, prompt_ids)

    async def _drain(self) -> None:
        """Decode pending requests in batches of equal sampling settings until none is left."""
        while self._pending:
            await asyncio.sleep(0)  # let coroutines that are about to submit join this batch
            if not self._pending:  # an abort answered them meanwhile
                break
            sampling = self._pending[0].sampling
            batch = [r for r in self._pending if r.sampling == sampling][: self.max_batch_size]
            self._pending = [r for r in self._pending if not any(r is b for b in batch)]
            started = time.perf_counter()
            try:
                outputs = await asyncio.to_thread(self.generator.generate_ids, [r.prompt_ids for r in batch], sampling,
                                                  images=[r.images for r in batch], interrupted=self._interrupt.is_set)
            except Exception as error:  # every waiting request learns why
                for r in batch:
                    r.done.set_exception(error)
                continue
            finally:
                self._busy_seconds += time.perf_counter() - started
            for r, out in zip(batch, outputs):
                r.done.set_result(out)

    # ----------------------------------------------------------------- weights
    def update_weights(self, named_tensors: dict[str, torch.Tensor]) -> int:
        """Copy the actor's full weights (HF parameter names) into the server's model; returns the version."""
        state = self.model.state_dict()
        unknown = sorted(set(named_tensors) - set(state))
        if unknown:
            raise KeyError(f"weights not in the rollout model: {unknown[:5]} ({len(unknown)} in all)")
        with torch.no_grad():
            for name, tensor in named_tensors.items():
                state[name].copy_(tensor.to(state[name].dtype))
        self.weight_version += 1
        return self.weight_version

    def state_checksum(self) -> float:
        """Sum of all parameters (a cheap fingerprint the tests compare with the actor's)."""
        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model.parameters()))

    async def busy_seconds(self) -> float:
        """Wall time this server has spent decoding since it started (rollout_load.py reads it per iteration)."""
        return self._busy_seconds

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # ------------------------------------------------- verl's server lifecycle (nothing to free on a CPU)
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Close the gate; requests not yet decoding are answered "aborted" with no tokens, the batch being decoded
        stops after its current token and answers with its tokens so far. Returns once no decoding runs, so a
        weight update that follows never changes the weights under a decoding batch."""
        self._admission_gate().clear()
        self._rejecting = bool(reject_request)
        waiting, self._pending = self._pending, []
        for request in waiting:
            request.done.set_result(None)
        self._interrupt.set()
        try:
            if self._worker is not None:
                await asyncio.wait([self._worker])
        finally:
            self._interrupt.clear()
        return {"aborted_count": len(waiting)}

    async def resume_generation(self) -> None:
        """Open the gate again (after :meth:`abort_all_requests`)."""
        self._rejecting = False
        self._admission_gate().set()

    async def start_profile(self, **kwargs) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def model_folder(model_config: Any) -> str:
    """The local HF folder of verl's model config (an HFModelConfig, or the DictConfig verl hands replicas)."""
    return str(getattr(model_config, "local_path", None) or model_config["path"])


class HFReplica(RolloutReplica):
    """A rollout replica served by one :class:`HFRolloutServer` actor (hybrid mode: colocated with the actor), on the
    node of the replica's first worker, as verl's vLLM replica places its servers (the weight sync stays on that
    node; on a cluster of several nodes Ray would otherwise place the server anywhere)."""

    async def launch_servers(self) -> None:
        node_id = await self.workers[0].__ray_call__.remote(lambda worker: ray.get_runtime_context().get_node_id())
        server = (
            ray.remote(HFRolloutServer)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency,
                     scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False))
            .remote(
                model_path=model_folder(self.model_config),
                response_length=self.config.response_length,
                max_batch_size=max(1, int(self.config.max_num_seqs)),
                seed=int(getattr(self.config, "seed", 0) or 0) + self.replica_rank,
                num_threads=int(os.environ.get("SLEA_RL_HF_SERVER_THREADS", "0")),
                name=server_name(self.replica_rank),
            )
        )
        await server.set_global_steps.remote(None)  # waits until the model is loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-server-{self.replica_rank}"  # the load balancer's key; no HTTP endpoint


class HFServerAdapter(BaseRollout):
    """In-worker side of the hf rollout: pushes the actor's weights to the replica's server."""

    def __init__(self, config, model_config, device_mesh=None, replica_rank: int = -1, **kwargs):
        super().__init__(config, model_config, device_mesh)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        world *= self.config.pipeline_model_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_sender = rank % world == 0
        self._server: Optional[ray.actor.ActorHandle] = None

    def _server_handle(self) -> ray.actor.ActorHandle:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             global_steps: Optional[int] = None, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout supports wire_format='named_tensors' only, got {wire_format!r}")
        if hasattr(weights, "__aiter__"):  # a checkpoint engine's receive_weights (standalone replicas)
            full = {name: tensor.detach().to("cpu", copy=True) async for name, tensor in weights}
        else:  # the actor's own weights (hybrid replicas): materialising each tensor is a collective
            full = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if not self.is_sender:
            return
        server = self._server_handle()
        await server.update_weights.remote(full)
        if global_steps is not None:
            await server.set_global_steps.remote(global_steps)

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None


def register() -> None:
    """Register the ``hf`` replica (public registry) and its in-worker adapter (verl_private)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFReplica)
    register_rollout_adapter(ROLLOUT_NAME, f"{HFServerAdapter.__module__}.{HFServerAdapter.__qualname__}")


register()  # on import: the plug-in imports this module once the process imports verl.workers.rollout

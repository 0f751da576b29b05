"""Fixtures of the verl-engine tests: a tiny local Llama model folder (config + byte-level BPE tokenizer with a
ChatML template, no weights, no downloads), a tiny random Qwen2.5-VL folder and the composed run config."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model_dir(path: Path) -> Path:
    """A Llama config (2 layers, width 32) and a byte-level BPE tokenizer trained on Sokoban-like text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "You are the player in a Sokoban puzzle. # wall _ floor O target X box P player",
        "<think>Push the box towards the target.</think><action>up</action> <action>down</action>",
        "<action>left</action> <action>right</action> system user assistant",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<pad>", unk_token=None
    )
    fast.chat_template = CHATML
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2.5-VL folder with its processor (recipe/forge/hf/tiny_vlm.py)."""
    from recipe.forge.hf.tiny_vlm import save_tiny_vlm_dir

    return Path(save_tiny_vlm_dir(tmp_path_factory.mktemp("tiny_qwen2_5_vl")))


def compose_run_config(overrides: list[str]):
    """recipe/forge/config/forge_trainer.yaml composed with ``overrides`` (Hydra compose API)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "recipe" / "forge" / "config"), version_base=None):
        return compose(config_name="forge_trainer", overrides=overrides)


def step_row(traj: str, step: int, reward: float, episode_reward: float, cluster_id, anchor_obs: str = "obs",
             valid: bool = True, success: bool | None = None, library_version: int = 0) -> dict:
    """The extra_fields the forge agent loop writes for one step (through the row codec) of episode ``traj``
    (``<task uid>-<copy>``); ``success`` defaults to a positive episode reward."""
    from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
    from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record

    uid = traj.split("-")[0]
    record = StepRecord(uid=uid, traj_uid=traj, step=step, anchor_obs=anchor_obs, messages=[], plain_messages=[],
                        response_text="", action="", prompt_ids=[], response_ids=[], logprobs=[], reward=reward,
                        is_action_valid=valid, done=False, cluster_id=cluster_id, library_version=library_version)
    episode = TrajectoryRecord(uid=uid, traj_uid=traj, task="", task_type=None, steps=[], episode_reward=episode_reward,
                               success=episode_reward > 0 if success is None else success, length=0)
    return row_from_record(record, episode, StepExtras())


@pytest.fixture(scope="session")
def make_row():
    """:func:`step_row`, for tests that build verl rows by hand."""
    return step_row


@pytest.fixture(scope="session")
def run_config_factory():
    return compose_run_config


os.environ.setdefault("VERL_LOGGING_LEVEL", "WARN")


@contextlib.contextmanager
def agent_loop_stack(cfg, llm_client, num_cpus: int = 4, env_vars: dict | None = None):
    """verl's own AgentLoopManagerTQ with its workers on a local Ray (``num_cpus`` logical CPUs, ``env_vars`` in
    every process) and TransferQueue (SimpleStorage, one unit), the LLM server client given; yields the manager.
    ``cfg`` is a prepared run config."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    OmegaConf.resolve(cfg)
    cfg.transfer_queue.enable = True
    if ray.is_initialized():  # a Ray left by another test module would lack the logical CPUs needed here
        ray.shutdown()
    ray.init(num_cpus=num_cpus, include_dashboard=False,
             runtime_env={"env_vars": {"TRANSFER_QUEUE_ENABLE": "1", **(env_vars or {})}})
    tq.init(cfg.transfer_queue)
    try:
        yield AgentLoopManagerTQ.create(config=cfg, llm_client=llm_client, teacher_client=None, reward_loop_worker_handles=None)
    finally:
        tq.close()
        ray.shutdown()


def submit_tasks(manager, rows: list[dict], global_steps: int, validate: bool = False, wrap=None):
    """Submit dataset ``rows`` (one per task) like verl's trainer does (``validate``: as its ``_validate`` does,
    into the ``val`` partition) and sample the finished groups from verl's replay buffer (``wrap(buffer)``: what
    samples in its place); returns (KVBatchMeta, the uid of each row)."""
    import numpy as np
    import transfer_queue as tq
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    batch_dict = collate_fn(rows)
    batch_dict["uid"] = np.array([str(uuid.uuid4()) for _ in rows], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", global_steps)
    partition = "val" if validate else "train"
    if validate:
        tu.assign_non_tensor_data(batch, "validate", True)
    tags = [{"is_prompt": True, "status": "pending", "global_steps": global_steps}] * len(rows)
    tq.kv_batch_put(keys=list(batch["uid"]), partition_id=partition, tags=tags)
    manager.generate_sequences(batch)
    buffer = ReplayBuffer(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={}, poll_interval=0.2, train_batch_size=len(rows), gen_batch_size=len(rows),
    )
    if wrap is not None:
        buffer = wrap(buffer)
    meta, _ = buffer.sample(global_steps=global_steps, partition_id=partition, batch_size=len(rows))
    return meta, list(batch_dict["uid"])


@pytest.fixture(scope="session")
def verl_rollout():
    """The helpers above: ``agent_loop_stack``, ``submit_tasks``."""
    from types import SimpleNamespace

    return SimpleNamespace(agent_loop_stack=agent_loop_stack, submit_tasks=submit_tasks)

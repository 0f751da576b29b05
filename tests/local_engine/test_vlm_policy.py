"""A vision-language policy on the embedded engine (tiny random Qwen2.5-VL, tiny_vlm.py): prompts with images go
through the processor, batched generation gives the log-probs of one full forward pass per row, the update
recomputes them on the same images, LoRA adapts the language model only, and a checkpoint resumes exactly.
End to end: 2 iterations of forge on visual Sokoban with the library injected from the first iteration on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.injection import user_message
from agent_system.multi_turn_rollout.protocols import SamplingParams
from recipe.forge.engines.local.batch import build_step_batch
from recipe.forge.hf.generation import HFGenerator
from recipe.forge.hf.model_loading import PolicyConfig, build_policy
from recipe.forge.hf.sequences import pack
from recipe.forge.hf.tiny import actor_config
from recipe.forge.engines.local.trainer import LocalTrainer
from recipe.forge.engines.local.update import PolicyUpdater
from recipe.forge.hf.vision_inputs import ImagePrompts, batch_image_inputs
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(300)

RNG = np.random.default_rng(7)
# different sizes give different patch grids (1x4x4, 1x2x4, 1x4x2) and so different numbers of image tokens
IMAGES = [RNG.integers(0, 256, size=shape, dtype=np.uint8) for shape in ((56, 56, 3), (48, 80, 3), (112, 56, 3))]
CHATS = [
    [user_message("Where is the box?", IMAGES[0])],
    [{"role": "system", "content": "Think before every move, and never push a box into a corner."},
     user_message("The room is shown in the image. Push the box onto the target, one move at a time.", IMAGES[1])],
    [user_message("Go.", IMAGES[2])],
    [user_message("A turn without an image, in the same batch as three turns with one.")],
]
VISUAL_SOKOBAN = ["env.env_name=sokoban", "env.sokoban.mode=rgb_array", "env.max_steps=2"]


@pytest.fixture(scope="module")
def vlm_policy(tiny_vlm_dir):
    return build_policy(PolicyConfig(path=str(tiny_vlm_dir), use_reference=False))


def reference_logprobs(model, processor, chat, response_ids: list[int]) -> tuple[list[int], torch.Tensor]:
    """(prompt ids, (R,) log-probs of ``response_ids``) from one unpadded forward pass over the prompt and the
    response, inputs made by the processor's own chat path (PIL images) and positions by the model itself."""
    pil_chat = [{**m, "content": m["content"] if isinstance(m["content"], str) else
                 [{**p, "image": Image.fromarray(p["image"])} if p["type"] == "image" else p for p in m["content"]]}
                for m in chat]
    inputs = processor.apply_chat_template(pil_chat, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    prompt = inputs["input_ids"][0].tolist()
    full = torch.tensor([prompt + response_ids])
    extra = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
    if extra:
        extra["mm_token_type_ids"] = (full == model.config.image_token_id).int()
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=torch.ones_like(full), **extra).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
    return prompt, logp.gather(-1, torch.tensor(response_ids).unsqueeze(-1)).squeeze(-1)


def test_batched_generation_and_the_update_give_the_log_probs_of_a_full_forward_pass(vlm_policy):
    model, processor = vlm_policy.model.eval(), vlm_policy.processor
    generator = HFGenerator(model, vlm_policy.tokenizer, generator=torch.Generator().manual_seed(0),
                            processor=processor)
    # "e" ends rows at different steps, so finished rows leave the cache while the others decode on
    outputs = generator.generate(CHATS, SamplingParams(temperature=1.0, max_new_tokens=12, stop=("e",)))
    assert len({len(o.prompt_ids) for o in outputs}) == len(CHATS)  # left padding in the prefill
    assert len({len(o.response_ids) for o in outputs}) > 1

    for chat, out in zip(CHATS, outputs):
        prompt, expected = reference_logprobs(model, processor, chat, out.response_ids)
        assert out.prompt_ids == prompt
        assert (torch.tensor(out.logprobs) - expected).abs().max() < 1e-5

    images = [generator.encode(chat)[1] for chat in CHATS]
    assert images[3] is None and [i.image_grid_thw.tolist() for i in images[:3]] == [[[1, 4, 4]], [[1, 2, 4]],
                                                                                       [[1, 4, 2]]]
    packed = pack([o.prompt_ids for o in outputs], [o.response_ids for o in outputs], vlm_policy.tokenizer.pad_token_id,
                  images=images)
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0),
                            actor_config(ppo_micro_batch_size_per_gpu=3))  # micro-batches of 3 and 1 rows
    recomputed = updater.log_probs(model, packed)
    rollout = torch.zeros_like(recomputed)
    rollout[packed.response_mask.bool()] = torch.tensor([lp for o in outputs for lp in o.logprobs])
    gap = (recomputed - rollout).abs().max().item()
    assert gap < 1e-5, gap  # the issue asks < 1e-3

    # the check tells wrong positions apart: text positions instead of the model's 3-D ones move the log-probs
    with torch.no_grad():
        text_positions = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                               position_ids=packed.position_ids, **batch_image_inputs(packed.images)).logits
    r = packed.responses.shape[1]
    wrong = torch.log_softmax(text_positions[:, -r - 1:-1].float(), -1).gather(-1, packed.responses.unsqueeze(-1))
    assert ((wrong.squeeze(-1) - rollout) * packed.response_mask).abs().max() > 10 * max(gap, 1e-6)


def test_recorded_prompt_ids_must_match_the_images_processed_again(vlm_policy):
    prompts = ImagePrompts(vlm_policy.processor)
    ids, images = prompts.encode(CHATS[0])
    again = prompts.images(CHATS[0], ids)
    assert torch.equal(again.pixel_values, images.pixel_values)
    assert torch.equal(again.image_grid_thw, images.image_grid_thw)
    with pytest.raises(ValueError, match=r"the prompt ids hold 0 image tokens but its 1 image\(s\) make 4"):
        prompts.images(CHATS[0], [i for i in ids if i != prompts.image_token_id])
    with pytest.raises(ValueError, match="an image part of a message has no 'image'"):
        prompts.encode([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}])


def test_lora_adapts_the_language_model_only(tiny_vlm_dir):
    def trainable(targets):
        policy = build_policy(PolicyConfig(path=str(tiny_vlm_dir), lora_rank=4, target_modules=targets))
        return [name for name, p in policy.model.named_parameters() if p.requires_grad]

    every = trainable("all-linear")
    layers = {name.split(".lora_")[0] for name in every}
    assert all(".language_model.layers." in name and ".lora_" in name for name in every)
    assert len(layers) == 2 * 7  # q, k, v, o, gate, up, down in both layers; no vision block, merger or LM head
    # the vision tower's MLP has a down_proj too: only the language model's are adapted
    assert {name.split(".lora_")[0] for name in trainable(["down_proj"])} == {
        f"base_model.model.model.language_model.layers.{i}.mlp.down_proj" for i in range(2)}
    with pytest.raises(ConfigError, match="names no linear layer of the language model"):
        trainable(["qkv"])  # the vision tower's attention only


def trainer_of(compose_cfg, run_overrides, output_dir, model_dir, iterations: int, extra=()) -> LocalTrainer:
    overrides = run_overrides(output_dir, iterations=iterations) + VISUAL_SOKOBAN + [
        f"actor_rollout_ref.model.path={model_dir}", *extra]
    return LocalTrainer(validate(compose_cfg(overrides)))


def test_two_forge_iterations_on_visual_sokoban_train_with_the_library_injected(tmp_path, tiny_vlm_dir, compose_cfg,
                                                                                 run_overrides):
    dump = tmp_path / "dump"
    trainer = trainer_of(compose_cfg, run_overrides, tmp_path / "run", tiny_vlm_dir, 2, [
        f"trainer.rollout_data_dir={dump}", "algorithm.forge.use_distillation=true",
        # the paper's return: its turn-dependent step advantages give each iteration a gradient even when the random
        # model's answers are all alike (what the action led to then values every step the same: no gradient)
        "algorithm.forge.step_value=return"])
    first, second = trainer.fit()

    for metrics in (first, second):
        assert metrics["actor/grad_norm"] > 0
    assert first["forge/library_total_size"] > 0 and second["distill/rows"] > 0
    lines = {i: [json.loads(x) for x in (dump / f"{i}.jsonl").read_text().splitlines()] for i in (1, 2)}
    assert all(not line["experience_ids"] for line in lines[1])  # iteration 1 starts from an empty library
    assert all(line["experience_ids"] for line in lines[2])  # warm-up 0, gate 0: every step is shown lessons
    for line in lines[2]:
        assert "Lessons from past episodes" in line["input"] and "<|image_pad|>" in line["input"]
        assert "pixel" not in json.dumps(line)

    rollout = trainer.collector.collect(trainer.train_envs, trainer.generator, trainer.run.rollout.sampling(),
                                        experience_provider=trainer.experience.provider)
    batch = build_step_batch(rollout, trainer.tokenizer.pad_token_id, 0.1, trainer.generator.image_prompts)
    assert all(images is not None for images in batch.packed.images)
    # retrieval and step groups read the text of the state, not the image
    for record in batch.records:
        assert isinstance(record.anchor_obs, str) and record.anchor_obs.count("#") >= 8
        assert record.experience_ids
    recomputed = trainer.updater.log_probs(trainer.policy.model, batch.packed)
    assert (recomputed - batch.old_log_probs).abs().max() < 1e-5


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_resumed_run_continues_as_an_uninterrupted_one(tmp_path, tiny_vlm_dir, compose_cfg, run_overrides, lora):
    extra = ["trainer.save_freq=1", "algorithm.forge.library_save_freq=1"]
    if lora:
        extra += ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"]
    straight = trainer_of(compose_cfg, run_overrides, tmp_path / "a", tiny_vlm_dir, 2, extra)
    straight_history = straight.fit()
    trainer_of(compose_cfg, run_overrides, tmp_path / "b", tiny_vlm_dir, 1, extra).fit()
    resumed = trainer_of(compose_cfg, run_overrides, tmp_path / "b", tiny_vlm_dir, 2,
                         extra + ["trainer.resume_mode=auto"])
    resumed_history = resumed.fit()

    assert [h["iteration"] for h in resumed_history] == [2]
    for (name, a), b in zip(straight.policy.model.named_parameters(), resumed.policy.model.parameters()):
        assert torch.equal(a, b), name
    keys = ("actor/pg_loss", "actor/grad_norm", "forge/library_total_size")
    assert {k: straight_history[-1][k] for k in keys} == {k: resumed_history[-1][k] for k in keys}


def test_a_critic_on_a_vision_language_model_starts_from_its_weights_and_reads_the_images(tmp_path, tiny_vlm_dir,
                                                                                          compose_cfg, run_overrides):
    trainer = trainer_of(compose_cfg, run_overrides, tmp_path, tiny_vlm_dir, 1,
                         ["algorithm.adv_estimator=gae", "critic.enable=true"])
    policy = dict(trainer.policy.model.named_parameters())
    backbone = dict(trainer.critic.backbone.named_parameters())
    assert {name.split(".")[0] for name in backbone} == {"language_model", "visual"}
    assert all(torch.equal(policy[f"model.{name}"], value) for name, value in backbone.items())
    metrics = trainer.fit()[-1]
    assert np.isfinite(metrics["critic/vf_loss"]) and metrics["actor/grad_norm"] > 0

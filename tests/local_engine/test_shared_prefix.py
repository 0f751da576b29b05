"""The shared-prompt-prefix forward (trainer.local.share_prompt_prefix) against the plain forward over whole
padded rows: the split of hand-worked prompts, equal response log-probs (< 1e-5 in fp32) and equal gradients on
varied prompt sets (a long shared template, no shared token at all, identical prompts, a single row, one-token
prompts, padding on both sides), the critic's values, the whole PPO update, LoRA, generation, and the refusals
(an empty prompt, gradient checkpointing in training mode) and the config key."""

import copy

import pytest
import torch

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import RolloutBatch, SamplingParams, StepRecord, TrajectoryRecord
from recipe.forge.engines.local.batch import build_step_batch
from recipe.forge.hf.generation import HFGenerator
from recipe.forge.hf.sequences import pack, response_logits, token_logprobs
from recipe.forge.run_config import check_run_config
from recipe.forge.hf.shared_prefix import SharedPrefix
from recipe.forge.hf.tiny import actor_config
from recipe.forge.engines.local.update import PolicyUpdater, ValueModel

VOCAB, PAD = 128, 0
TEMPLATE = list(range(10, 40))  # 30 tokens every prompt of a set starts with (chat template + instructions)


def llama_config(attn: str = "sdpa"):
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=PAD, tie_word_embeddings=True)
    config._attn_implementation = attn
    return config


def causal_lm(seed: int = 0, attn: str = "sdpa"):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(attn))


PROMPT_SETS = {
    # states after the template, two rows with the same whole prompt, unequal lengths (left padding)
    "template_then_states": [TEMPLATE + [50, 51, 52], TEMPLATE + [60], TEMPLATE + [50, 51, 52],
                             TEMPLATE + [70, 71, 72, 73, 74, 75], TEMPLATE + [50, 51, 53]],
    # nothing beyond the template in common, and one prompt that is the template itself
    "only_the_template": [TEMPLATE + [41, 42], TEMPLATE + [43, 44, 45], TEMPLATE],
    # no token in common, and a one-token prompt whose rest is empty while the others' is not
    "no_common_token": [[5, 6, 7, 8], [9, 6, 7], [11, 12, 13, 14, 15, 16], [17]],
    "identical_prompts": [TEMPLATE + [50, 51]] * 4,
    "one_row": [TEMPLATE + [50, 51, 52]],
    "one_token_prompts": [[5], [6], [5]],
}
RESPONSES = [[1, 2, 3], [4], [5, 6, 7, 8, 9], [2, 3], [7, 7, 7, 7], [8, 9, 10]]


def packed_rows(name: str):
    prompts = PROMPT_SETS[name]
    return pack(prompts, RESPONSES[:len(prompts)], PAD)


def logprobs_and_grads(model, packed, share: bool):
    """Masked response log-probs (bs, R) and the gradient of a weighted sum of them, per parameter."""
    model.zero_grad(set_to_none=True)
    logp = token_logprobs(response_logits(model, packed, share), packed.responses) * packed.response_mask
    weights = torch.linspace(-1.0, 2.0, logp.numel()).reshape(logp.shape)  # every token matters differently
    (logp * weights).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(plain: dict, shared: dict):
    assert plain.keys() == shared.keys()
    for name in plain:
        torch.testing.assert_close(shared[name], plain[name], atol=1e-5, rtol=1e-4, msg=name)


# ---------------------------------------------------------------- the split
def test_split_of_hand_worked_prompts():
    split = SharedPrefix.of_prompts([[1, 2, 3, 4, 5], [1, 2, 3, 9, 5], [1, 2, 3, 4, 5], [1, 2, 7]])
    # heads (prompt minus its last token): [1 2 3 4], [1 2 3 9], [1 2 3 4], [1 2]; common part [1 2]
    assert split.common_ids.tolist() == [[1, 2]]
    assert split.rest_ids.tolist() == [[3, 4], [3, 9], [0, 0]]
    assert split.rest_mask.tolist() == [[1, 1], [1, 1], [0, 0]]
    assert split.rest_of_row.tolist() == [0, 1, 0, 2]
    assert split.last_ids.tolist() == [5, 5, 5, 7]
    assert split.prompt_lengths.tolist() == [5, 5, 5, 3]
    assert split.prefix_tokens() == 2 + 3 * 2


def test_prompts_come_back_unpadded_from_a_packed_batch():
    prompts = PROMPT_SETS["no_common_token"]
    assert packed_rows("no_common_token").prompts() == prompts


def test_an_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="empty prompt"):
        SharedPrefix.of_prompts([[1, 2], []])


# ---------------------------------------------------------------- equal to the plain forward
@pytest.mark.parametrize("name", sorted(PROMPT_SETS))
def test_log_probs_and_gradients_equal_the_plain_forward(name):
    model = causal_lm()
    packed = packed_rows(name)
    plain_logp, plain_grads = logprobs_and_grads(model, packed, share=False)
    shared_logp, shared_grads = logprobs_and_grads(model, packed, share=True)
    assert (shared_logp - plain_logp).abs().max().item() < 1e-5
    assert_same_grads(plain_grads, shared_grads)


def test_eager_attention_gives_the_same_result():
    model = causal_lm(attn="eager")
    packed = packed_rows("template_then_states")
    plain_logp, plain_grads = logprobs_and_grads(model, packed, share=False)
    shared_logp, shared_grads = logprobs_and_grads(model, packed, share=True)
    assert (shared_logp - plain_logp).abs().max().item() < 1e-5
    assert_same_grads(plain_grads, shared_grads)


def test_the_shared_prefix_gradients_are_the_same_on_every_run():
    """Rows that read one cache row add their gradients into it in a fixed order: before, advanced indexing's backward
    (index_put_ with accumulate) added them in a thread-dependent order on a CPU, and two runs of one fp32 update
    differed in the last bits (two main-job runs 3e-7 apart after one iteration), so a resumed run never equalled the
    uninterrupted one. 64 rows on one 40-token prefix, a cache large enough for torch to split the sum over threads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=4, pad_token_id=PAD))
    generator = torch.Generator().manual_seed(1)
    prompts = [list(range(10, 50)) + [int(t)] for t in torch.randint(60, 120, (64,), generator=generator)]
    packed = pack(prompts, [[1, 2, 3]] * len(prompts), PAD)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, 2))
    try:
        _, first = logprobs_and_grads(model, packed, share=True)
        for _ in range(4):
            _, again = logprobs_and_grads(model, packed, share=True)
            assert all(torch.equal(again[name], first[name]) for name in first)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_both_forwards_equal_each_row_alone(share_prefix):
    """The reference itself: the plain padded forward (which the tests above compare the shared one with), and the
    shared one too, equal an unpadded pass of each row on its own."""
    model = causal_lm()
    prompts = PROMPT_SETS["template_then_states"]
    packed = packed_rows("template_then_states")
    with torch.no_grad():
        logits = response_logits(model, packed, share_prefix=share_prefix)
        for row, (prompt, response) in enumerate(zip(prompts, RESPONSES)):
            alone = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1:-1]
            torch.testing.assert_close(logits[row, :len(response)], alone, atol=1e-5, rtol=1e-5)


def test_lora_gradients_equal_the_plain_forward():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(causal_lm(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                   init_lora_weights=False))
    packed = packed_rows("template_then_states")
    plain_logp, plain_grads = logprobs_and_grads(model, packed, share=False)
    shared_logp, shared_grads = logprobs_and_grads(model, packed, share=True)
    assert (shared_logp - plain_logp).abs().max().item() < 1e-5
    assert all("lora" in name for name in plain_grads)
    assert_same_grads(plain_grads, shared_grads)


def test_critic_values_equal_the_plain_forward():
    from transformers import LlamaModel

    torch.manual_seed(0)
    critic = ValueModel(LlamaModel(llama_config()), 32)
    torch.nn.init.normal_(critic.value_head.weight)
    packed = packed_rows("template_then_states")
    mask = packed.response_mask  # padding columns hold no state's value
    torch.testing.assert_close(critic(packed, share_prefix=True) * mask, critic(packed) * mask, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- the update and generation
def step_batch():
    prompts = PROMPT_SETS["template_then_states"] + PROMPT_SETS["only_the_template"]
    responses = (RESPONSES * 2)[:len(prompts)]
    steps = [StepRecord(uid=f"g{i % 2}", traj_uid=f"t{i}", step=0, anchor_obs="", messages=[], plain_messages=[],
                        response_text="", action="", prompt_ids=p, response_ids=r, logprobs=[0.0] * len(r),
                        reward=0.0, is_action_valid=True, done=True)
             for i, (p, r) in enumerate(zip(prompts, responses))]
    trajectories = [TrajectoryRecord(uid=s.uid, traj_uid=s.traj_uid, task="", task_type=None, steps=[s],
                                     episode_reward=0.0, success=False, length=1) for s in steps]
    return build_step_batch(RolloutBatch(steps, trajectories), PAD, 0.0)


@pytest.mark.parametrize("micro_batch_size", [1, 3, 8])
def test_a_ppo_update_learns_the_same_with_and_without_sharing(micro_batch_size):
    batch = step_batch()
    mask = batch.response_mask
    g = torch.Generator().manual_seed(1)
    advantages = torch.randn((len(batch), 1), generator=g) * mask
    results = {}
    for share in (False, True):
        model = causal_lm()
        actor = actor_config(ppo_micro_batch_size_per_gpu=micro_batch_size, ppo_mini_batch_size=4, use_kl_loss=True,
                             entropy_coeff=0.01)
        updater = PolicyUpdater(model, torch.optim.AdamW(model.parameters(), lr=1e-2), actor,
                                share_prompt_prefix=share)
        old = updater.log_probs(model, batch.packed)
        old = (old + 0.1 * torch.randn(old.shape, generator=torch.Generator().manual_seed(2))) * mask
        metrics = updater.update(batch, advantages, old, ref_log_probs=old)
        results[share] = (old, metrics, {n: p.detach().clone() for n, p in model.named_parameters()})
    (old_p, metrics_p, weights_p), (old_s, metrics_s, weights_s) = results[False], results[True]
    assert (old_p - old_s).abs().max().item() < 1e-5  # the no-grad log-prob pass
    assert metrics_p.keys() == metrics_s.keys()
    for key in metrics_p:
        assert metrics_s[key] == pytest.approx(metrics_p[key], rel=1e-4, abs=1e-5), key
    moved = max((weights_p[n] - causal_lm().state_dict()[n]).abs().max().item() for n in weights_p)
    assert moved > 1e-3  # the update changed the weights, so equal weights after it mean equal learning
    for name in weights_p:
        torch.testing.assert_close(weights_s[name], weights_p[name], atol=1e-5, rtol=1e-4, msg=name)


def test_generation_with_a_shared_prefill_matches_the_plain_one(tokenizer, make_tiny):
    model = make_tiny(taught=True)
    texts = ["Move to the target.\nTarget: 2\nCurrent: 1", "Move to the target.\nTarget: 0\nCurrent: 3",
             "Move to the target.\nTarget: 2\nCurrent: 1", "x"]
    messages = [[{"role": "system", "content": "You are an agent."}, {"role": "user", "content": t}] for t in texts]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, stop=("</action>",))
    outputs = {}
    for share in (False, True):
        gen = HFGenerator(model, tokenizer, batch_size=8, generator=torch.Generator().manual_seed(3),
                          response_prefix="<action>", share_prompt_prefix=share)
        outputs[share] = gen.generate(messages, sampling)
    for plain, shared in zip(outputs[False], outputs[True]):
        assert shared.prompt_ids == plain.prompt_ids
        assert shared.response_ids == plain.response_ids and shared.text == plain.text
        torch.testing.assert_close(torch.tensor(shared.logprobs), torch.tensor(plain.logprobs), atol=1e-5, rtol=0)
    assert len({tuple(o.response_ids) for o in outputs[True]}) > 1  # sampled: the rows differ


# ---------------------------------------------------------------- refusals and the config key
def test_gradient_checkpointing_in_training_is_refused_not_run_without_the_prompt():
    model = causal_lm()
    model.gradient_checkpointing_enable()
    model.train()
    packed = packed_rows("template_then_states")
    with pytest.raises(ValueError, match="gradient checkpointing drops"):
        response_logits(model, packed, share_prefix=True)
    with torch.no_grad(), pytest.raises(ValueError, match="gradient checkpointing drops"):
        response_logits(model, packed, share_prefix=True)  # training mode drops the cache without grad too
    model.eval()  # evaluation keeps its cache: allowed, and equal
    mask = packed.response_mask.unsqueeze(-1)  # padding columns predict nothing
    torch.testing.assert_close(response_logits(model, packed, share_prefix=True) * mask,
                               response_logits(model, packed) * mask)


def test_the_key_defaults_to_true(compose_cfg, run_overrides, tmp_path):
    _, _, _, sections = check_run_config(compose_cfg(run_overrides(tmp_path)))
    assert sections["local"].share_prompt_prefix is True


def test_gradient_checkpointing_keeps_the_update_plain(compose_cfg, run_overrides, tmp_path, taught_policy):
    """verl's default turns gradient checkpointing on; it drops the KV cache, so only generation shares."""
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.main_forge import validate

    cfg = compose_cfg(run_overrides(tmp_path) + ["actor_rollout_ref.model.enable_gradient_checkpointing=true"])
    trainer = LocalTrainer(validate(cfg), Components(policy=copy.deepcopy(taught_policy)))
    assert trainer.generator.share_prompt_prefix is True
    assert trainer.updater.share_prompt_prefix is False


def test_the_key_must_be_a_boolean(compose_cfg, run_overrides, tmp_path):
    with pytest.raises(ConfigError, match="trainer.local.share_prompt_prefix='yes' must be true or false"):
        check_run_config(compose_cfg(run_overrides(tmp_path) + ["trainer.local.share_prompt_prefix=yes"]))


@pytest.mark.parametrize("share", [False, True])
def test_the_trainer_hands_the_key_to_generation_and_update(compose_cfg, run_overrides, tmp_path, taught_policy,
                                                            share):
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.main_forge import validate

    cfg = compose_cfg(run_overrides(tmp_path) + [f"trainer.local.share_prompt_prefix={str(share).lower()}",
                                                 "actor_rollout_ref.model.enable_gradient_checkpointing=false"])
    trainer = LocalTrainer(validate(cfg), Components(policy=copy.deepcopy(taught_policy)))
    assert trainer.generator.share_prompt_prefix is share
    assert trainer.updater.share_prompt_prefix is share


# ---------------------------------------------------------------- scripts/bench_update.py's counts
def test_the_benchmark_counts_positions_and_flops_by_hand(load_script):
    from transformers import LlamaConfig

    bench = load_script("bench_update.py")
    smollm2 = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                          num_attention_heads=9, num_key_value_heads=3)
    # per layer: q, o 576x576; k, v 576x192; gate, up 576x1536; down 1536x576 -> 3,538,944 weights, x 30 x 2
    assert bench.linear_flops_per_position(smollm2) == 2 * 30 * 3_538_944
    assert bench.pass_flops(smollm2, 10, 3) == 10 * 2 * 30 * 3_538_944 + 3 * 2 * 576 * 49152
    packed = pack([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 3, 4]], [[7], [8, 9], [7]], PAD)
    assert bench.decoder_positions(packed, share=False) == 3 * (5 + 2)
    # common [1 2 3], rests (), (5,) -> 3 + 2 x 1 prefix positions, then 3 tails of 1 + 2
    assert bench.decoder_positions(packed, share=True) == 3 + 2 + 3 * 3

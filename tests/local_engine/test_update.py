"""The policy update's pieces against independent references written here: the micro-batch loss against a
naive PPO loss over unpadded rows, the metrics accumulator against hand-worked averages, micro-batch gradient
accumulation against the whole mini-batch's gradient, and the whole loop against a naive loop of full
mini-batch SGD steps."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord, TrajectoryRecord
from recipe.forge.engines.local.batch import build_step_batch
from recipe.forge.hf.sequences import pack
from recipe.forge.hf.tiny import actor_config
from recipe.forge.engines.local.update import (
    DistillationInputs, MetricsAccumulator, PolicyUpdater, UpdateTargets, ValueModel,
)

PROMPT_LENGTHS = (3, 6, 4, 5, 2)
RESPONSE_LENGTHS = (2, 4, 1, 3, 4)
VOCAB, PAD = 256, 0  # a small vocabulary keeps every forward pass cheap


def small_llama_config(layers: int = 2):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, pad_token_id=PAD, tie_word_embeddings=True)


@pytest.fixture
def rows():
    """Five (prompt, response) token lists of unequal lengths, so packing pads both sides."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    responses = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in RESPONSE_LENGTHS]
    return prompts, responses


@pytest.fixture
def batch(rows):
    prompts, responses = rows
    steps = [StepRecord(uid="g", traj_uid=f"t{i}", step=0, anchor_obs="", messages=[], plain_messages=[],
                        response_text="", action="", prompt_ids=p, response_ids=r, logprobs=[0.0] * len(r),
                        reward=0.0, is_action_valid=True, done=True)
             for i, (p, r) in enumerate(zip(prompts, responses))]
    trajectories = [TrajectoryRecord(uid="g", traj_uid=s.traj_uid, task="", task_type=None, steps=[s],
                                     episode_reward=0.0, success=False, length=1) for s in steps]
    return build_step_batch(RolloutBatch(steps, trajectories), PAD, 0.0)


@pytest.fixture
def model():
    """A random two-layer Llama."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(small_llama_config())


@pytest.fixture
def targets(batch, model):
    """Old and reference log-probs near the model's (so some ratios clip) and per-row advantages, two of them
    negative (the dual-clip branch) and one zero."""
    g = torch.Generator().manual_seed(1)
    mask = batch.response_mask
    current = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), actor_config()).log_probs(
        model, batch.packed)
    old = (current + 0.3 * torch.randn(current.shape, generator=g)) * mask
    ref = (current + 0.2 * torch.randn(current.shape, generator=g)) * mask
    advantages = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.5])[:, None] * mask
    return {"advantages": advantages, "old_log_probs": old, "ref_log_probs": ref}


# ---------------------------------------------------------------- naive references
def naive_token_logits(model, prompt, response):
    """(r, vocab) logits predicting each response token, from one unpadded forward pass of the whole row."""
    ids = torch.tensor([prompt + response])
    return model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(response)].float()


def naive_ppo_terms(model, rows, row_ids, targets, clip=0.2, clip_c=3.0):
    """Per row, (r,) tensors of the dual-clip PPO loss, the entropy and the low-variance KL to the reference."""
    prompts, responses = rows
    out = []
    for i in row_ids:
        logits = naive_token_logits(model, prompts[i], responses[i])
        logp_all = F.log_softmax(logits, dim=-1)
        r = len(responses[i])
        logp = logp_all[torch.arange(r), torch.tensor(responses[i])]
        adv = targets["advantages"][i, :r]
        ratio = torch.exp(logp - targets["old_log_probs"][i, :r])
        clipped = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))
        pg = torch.where(adv < 0, torch.minimum(clipped, -adv * clip_c), clipped)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        log_ref_ratio = targets["ref_log_probs"][i, :r] - logp
        kl = log_ref_ratio.exp() - log_ref_ratio - 1
        out.append({"pg": pg, "entropy": entropy, "kl": kl})
    return out


def aggregate(per_row, mode, horizon):
    """verl's loss aggregations written out over a list of (r_i,) per-token tensors."""
    if mode == "token-mean":
        return torch.cat(per_row).mean()
    if mode == "token-sum":
        return torch.cat(per_row).sum()
    if mode == "seq-mean-token-mean":
        return torch.stack([t.mean() for t in per_row]).mean()
    if mode == "seq-mean-token-sum":
        return torch.stack([t.sum() for t in per_row]).mean()
    if mode == "seq-mean-token-sum-norm":
        return torch.stack([t.sum() for t in per_row]).mean() / horizon
    raise AssertionError(mode)


# ---------------------------------------------------------------- the micro-batch loss
AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batch_losses_sum_to_a_naive_mini_batch_ppo_loss(agg, rows, batch, model, targets):
    settings = actor_config(loss_agg_mode=agg, entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.1,
                            kl_loss_type="low_var_kl")
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), settings)
    split = UpdateTargets(batch, targets["advantages"], targets["old_log_probs"], targets["ref_log_probs"],
                          None, None, None)
    mini = np.array([4, 0, 3, 1, 2])
    norm = split.mini_batch_norm(mini)
    assert (norm.batch_num_tokens, norm.global_batch_size) == (sum(RESPONSE_LENGTHS), 5)

    parts = [updater.policy_loss(split.micro_batch(micro, torch.device("cpu")), norm)
             for micro in (mini[:2], mini[2:])]
    terms = naive_ppo_terms(model, rows, mini, targets)
    horizon = max(RESPONSE_LENGTHS)
    expected = {name: aggregate([t[name] for t in terms], agg, horizon) for name in ("pg", "entropy", "kl")}
    loss = sum(loss for loss, _ in parts)
    assert loss.item() == pytest.approx((expected["pg"] - 0.01 * expected["entropy"] + 0.1 * expected["kl"]).item(),
                                        rel=1e-5, abs=1e-6)
    for key, name in (("actor/pg_loss", "pg"), ("actor/entropy", "entropy"), ("actor/kl_loss", "kl")):
        assert sum(metrics[key] for _, metrics in parts) == pytest.approx(expected[name].item(), rel=1e-5, abs=1e-6)


def test_clip_fraction_counts_the_clipped_tokens(rows, batch, model, targets):
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), actor_config())
    split = UpdateTargets(batch, targets["advantages"], targets["old_log_probs"], None, None, None, None)
    everything = np.arange(5)
    _, metrics = updater.policy_loss(split.micro_batch(everything, torch.device("cpu")),
                                     split.mini_batch_norm(everything))
    prompts, responses = rows
    clipped = []
    for i in everything:
        logits = naive_token_logits(model, prompts[i], responses[i])
        r = len(responses[i])
        logp = F.log_softmax(logits, -1)[torch.arange(r), torch.tensor(responses[i])]
        ratio = torch.exp(logp - targets["old_log_probs"][i, :r])
        adv = targets["advantages"][i, :r]
        clipped.append(-adv * ratio.clamp(0.8, 1.2) > -adv * ratio)
    fraction = torch.cat(clipped).float().mean().item()
    assert 0 < fraction < 1  # the fixture exercises both branches
    assert metrics["actor/pg_clipfrac"] == pytest.approx(fraction)


# ---------------------------------------------------------------- the metrics accumulator
def test_metrics_accumulator_sums_loss_shares_per_mini_batch_and_averages_the_rest():
    acc = MetricsAccumulator()
    acc.add_micro_batch({"actor/pg_loss": 0.5, "actor/pg_clipfrac": 0.1, "distill/loss": 0.25})
    acc.add_micro_batch({"actor/pg_loss": 0.25, "actor/pg_clipfrac": 0.3})
    acc.end_mini_batch(torch.tensor(2.0))
    acc.end_mini_batch(torch.tensor(6.0))  # a mini-batch whose rows were all skipped: a grad norm only
    acc.add_micro_batch({"actor/pg_loss": 1.0, "actor/pg_clipfrac": 0.2, "distill/loss": 0.5})
    acc.end_mini_batch(1.0)
    assert acc.averages() == pytest.approx({
        "actor/pg_loss": (0.75 + 1.0) / 2,  # mini-batch sums 0.5 + 0.25 and 1.0, averaged
        "distill/loss": (0.25 + 0.5) / 2,
        "actor/pg_clipfrac": (0.1 + 0.3 + 0.2) / 3,  # averaged over micro-batches
        "actor/grad_norm": (2.0 + 6.0 + 1.0) / 3,  # averaged over mini-batches
    })


# ---------------------------------------------------------------- gradient accumulation
def critic():
    from transformers import LlamaModel

    torch.manual_seed(3)
    critic = ValueModel(LlamaModel(small_llama_config(layers=1)), 32)
    torch.nn.init.normal_(critic.value_head.weight, std=0.1)
    return critic


def distillation_of(rows):
    """Rows 1, 2 and 4 distilled: the student sees the last two prompt tokens, the teacher the whole prompt."""
    prompts, responses = rows
    picked = [1, 2, 4]
    return DistillationInputs(torch.tensor(picked), pack([prompts[i][-2:] for i in picked], [responses[i] for i in picked], PAD),
                              pack([prompts[i] for i in picked], [responses[i] for i in picked], PAD),
                              weight=0.5, divergence="jsd", temperature=1.0)


def gradients(module):
    return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])


CASES = {
    "vanilla token-mean": ({}, {}),
    "seq-mean-token-mean with KL and entropy": (
        {"loss_agg_mode": "seq-mean-token-mean", "use_kl_loss": True, "entropy_coeff": 0.01}, {}),
    "gspo seq-mean-token-sum-norm": ({"loss_mode": "gspo", "loss_agg_mode": "seq-mean-token-sum-norm"}, {}),
    "critic": ({}, {"critic": True}),
    "distillation": ({}, {"distill": True}),
}


LOSS_KEYS = {
    "vanilla token-mean": ("actor/pg_loss", "actor/grad_norm"),
    "seq-mean-token-mean with KL and entropy": ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss",
                                                "actor/entropy"),
    "gspo seq-mean-token-sum-norm": ("actor/pg_loss", "actor/grad_norm"),
    "critic": ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss"),
    "distillation": ("actor/pg_loss", "actor/grad_norm", "distill/loss"),
}


@pytest.mark.parametrize("case", CASES)
def test_micro_batches_accumulate_the_mini_batch_gradient(case, rows, batch, model, targets):
    settings, options = CASES[case]
    results = []
    for micro_size in (1, 2, 5):
        policy = copy.deepcopy(model)
        value_model = critic() if options.get("critic") else None
        updater = PolicyUpdater(
            policy, torch.optim.SGD(policy.parameters(), lr=0.0),  # lr 0: keep the weights, inspect the gradient
            actor_config(**settings, ppo_micro_batch_size_per_gpu=micro_size, grad_clip=1e9),
            critic=value_model,
            critic_optimizer=torch.optim.SGD(value_model.parameters(), lr=0.0) if value_model else None)
        extra = ({"returns": targets["advantages"] * 0.5, "old_values": targets["old_log_probs"] * 0.1}
                 if value_model else {})
        metrics = updater.update(batch, targets["advantages"], targets["old_log_probs"], targets["ref_log_probs"],
                                 distill=distillation_of(rows) if options.get("distill") else None,
                                 **extra)
        results.append((gradients(policy), gradients(value_model) if value_model else None, metrics))
    whole_grad, whole_critic, whole_metrics = results[-1]
    for grad, critic_grad, metrics in results[:-1]:
        assert torch.allclose(grad, whole_grad, rtol=1e-4, atol=1e-7)
        if whole_critic is not None:
            assert torch.allclose(critic_grad, whole_critic, rtol=1e-4, atol=1e-7)
        assert metrics.keys() == whole_metrics.keys()
        for key in LOSS_KEYS[case]:  # the micro-batches' loss shares add up to the mini-batch's loss
            assert metrics[key] == pytest.approx(whole_metrics[key], rel=1e-4, abs=1e-6), key
    assert whole_grad.abs().sum() > 0


# ---------------------------------------------------------------- the whole loop
def test_update_equals_a_naive_loop_of_mini_batch_sgd_steps(rows, batch, model, targets):
    """Two shuffled epochs of mini-batches of 2 (the last of 1) with micro-batches of 1, SGD with clipping:
    the same weights as stepping by the gradient of each mini-batch's naive token-mean PPO loss."""
    settings = actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, ppo_epochs=2, shuffle=True,
                            grad_clip=0.5)
    policy = copy.deepcopy(model)
    updater = PolicyUpdater(policy, torch.optim.SGD(policy.parameters(), lr=0.5), settings,
                            rng=np.random.default_rng(7))
    metrics = updater.update(batch, targets["advantages"], targets["old_log_probs"])

    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    order_rng = np.random.default_rng(7)
    norms, losses = [], []
    for _ in range(2):
        order = order_rng.permutation(5)
        for start in range(0, 5, 2):
            optimizer.zero_grad()
            terms = naive_ppo_terms(reference, rows, order[start:start + 2], targets)
            loss = torch.cat([t["pg"] for t in terms]).mean()
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)))
            if targets["advantages"][order[start:start + 2]].any():
                losses.append(loss.item())  # a mini-batch of zero-advantage rows only is skipped, loss unlogged
            optimizer.step()
    assert max(norms) > 0.5 and sum(n > 0 for n in norms) >= 3  # several steps, some clipped
    assert len(losses) == 5  # one of the 6 mini-batches is row 2 (zero advantage) alone
    for (name, got), want in zip(policy.named_parameters(), reference.parameters()):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), name
    assert metrics["actor/grad_norm"] == pytest.approx(np.mean(norms), rel=1e-4)
    assert metrics["actor/pg_loss"] == pytest.approx(np.mean(losses), rel=1e-4, abs=1e-6)


def test_a_non_finite_gradient_skips_the_policy_step(batch, model, targets):
    advantages = targets["advantages"].clone()
    advantages[1, 0] = float("nan")
    policy = copy.deepcopy(model)
    updater = PolicyUpdater(policy, torch.optim.SGD(policy.parameters(), lr=0.5),
                            actor_config(use_kl_loss=True))
    metrics = updater.update(batch, advantages, targets["old_log_probs"], targets["ref_log_probs"])
    assert np.isnan(metrics["actor/grad_norm"])
    for got, want in zip(policy.parameters(), model.parameters()):
        assert torch.equal(got, want)


def test_missing_inputs_are_named(batch, model, targets):
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), actor_config(use_kl_loss=True))
    with pytest.raises(ValueError, match="ref_log_probs"):
        updater.update(batch, targets["advantages"], targets["old_log_probs"])
    value_model = critic()
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), actor_config(), critic=value_model,
                            critic_optimizer=torch.optim.SGD(value_model.parameters(), lr=0.0))
    with pytest.raises(ValueError, match="returns or old_values"):
        updater.update(batch, targets["advantages"], targets["old_log_probs"])


def test_the_update_leaves_the_actor_config_it_was_given_as_it_was(batch, model, targets):
    actor = actor_config()
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), actor)
    updater.update(batch, targets["advantages"], targets["old_log_probs"])
    assert actor.global_batch_info == {}  # the mini-batch totals live in the updater's own copy
    assert updater.actor.global_batch_info
    assert updater.actor.ppo_micro_batch_size_per_gpu == actor.ppo_micro_batch_size_per_gpu


def test_the_progress_bar_counts_the_micro_batches_and_changes_nothing(batch, model, targets, capsys):
    settings = actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, ppo_epochs=2, shuffle=True)
    results = []
    for progress in (False, True):
        policy = copy.deepcopy(model)
        updater = PolicyUpdater(policy, torch.optim.SGD(policy.parameters(), lr=0.5), settings,
                                rng=np.random.default_rng(7), progress=progress)
        results.append((updater.update(batch, targets["advantages"], targets["old_log_probs"]), policy))
        shown = capsys.readouterr().err
        # 2 epochs x the 4 rows with an advantage (row 2 has none, so it is skipped), one row per micro-batch
        assert ("update:" in shown and "/8 " in shown) == progress, shown
    (quiet, quiet_policy), (shown, shown_policy) = results
    assert quiet == shown
    assert all(torch.equal(a, b) for a, b in zip(quiet_policy.parameters(), shown_policy.parameters()))

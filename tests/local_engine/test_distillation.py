"""Distillation divergences against hand formulas, their gradients, temperature scaling, the weight ramp, and which
steps are distillation rows (the rule both engines apply)."""

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord, TrajectoryRecord
from recipe.forge.distillation import (distillation_loss, distillation_weight, distilled_step,
                                       library_distillation_weight, token_divergence)
from recipe.forge.engines.local.batch import build_step_batch
from recipe.forge.engines.local.update import DistillationInputs


def naive(p, q, kind):
    """Divergence of two plain probability lists, written out term by term."""
    kl = lambda a, b: sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)  # noqa: E731
    if kind == "kl":
        return kl(p, q)
    if kind == "reverse_kl":
        return kl(q, p)
    m = [(x + y) / 2 for x, y in zip(p, q)]
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def test_hand_worked_two_token_example():
    # teacher p = (0.5, 0.5) (logits 0, 0); student q = (0.8, 0.2) (logits log 4, 0).
    teacher = torch.tensor([[[0.0, 0.0]]])
    student = torch.tensor([[[math.log(4.0), 0.0]]])
    kl = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    assert token_divergence(student, teacher, "kl").item() == pytest.approx(kl, rel=1e-5)
    rkl = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    assert token_divergence(student, teacher, "reverse_kl").item() == pytest.approx(rkl, rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-4, 4), min_size=3, max_size=3), st.lists(st.floats(-4, 4), min_size=3, max_size=3),
       st.sampled_from(["kl", "reverse_kl", "jsd"]), st.floats(0.5, 3.0))
def test_matches_naive_reference_with_temperature(student, teacher, kind, temperature):
    s = torch.tensor([[student]], dtype=torch.float64)
    t = torch.tensor([[teacher]], dtype=torch.float64)
    p = torch.softmax(t[0, 0] / temperature, -1).tolist()
    q = torch.softmax(s[0, 0] / temperature, -1).tolist()
    expected = naive(p, q, kind) * temperature**2
    assert token_divergence(s, t, kind, temperature).item() == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_zero_for_identical_distributions_and_jsd_bounded():
    logits = torch.randn(2, 3, 7)
    for kind in ("kl", "reverse_kl", "jsd"):
        assert token_divergence(logits, logits.clone(), kind).abs().max().item() < 1e-6
    far = token_divergence(torch.tensor([[[50.0, 0.0]]]), torch.tensor([[[0.0, 50.0]]]), "jsd")
    assert far.item() <= math.log(2) + 1e-6


def test_gradients_reach_the_student_only_and_mask_applies():
    student = torch.randn(2, 4, 11, requires_grad=True)
    teacher = torch.randn(2, 4, 11, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    for kind in ("kl", "reverse_kl", "jsd"):
        student.grad = None
        loss = distillation_loss(student, teacher, mask, kind, temperature=2.0)
        loss.backward()
        assert student.grad is not None and student.grad.abs().sum() > 0
        assert student.grad[0, 2:].abs().sum() == 0  # masked positions get no gradient
        assert teacher.grad is None  # the teacher is detached


def test_weight_ramps_with_library_fill():
    assert distillation_weight(0, 100, 0.5) == 0.0
    assert distillation_weight(50, 100, 0.5) == pytest.approx(0.25)
    assert distillation_weight(500, 100, 0.5) == pytest.approx(0.5)
    assert distillation_weight(10, 0, 0.5) == 0.0


def test_bad_arguments_are_named():
    x = torch.zeros(1, 1, 3)
    with pytest.raises(ValueError, match="divergence"):
        token_divergence(x, x, "tv")
    with pytest.raises(ValueError, match="temperature"):
        token_divergence(x, x, "kl", 0.0)
    with pytest.raises(ValueError, match="shape"):
        token_divergence(x, torch.zeros(1, 1, 4), "kl")


def test_library_weight_reads_the_capacity_of_the_forge_settings():
    # capacity: 3 levels x (2 golden + 3 warning) = 15 entries; 5 of them with max 0.6 give 0.6 x 5 / 15 = 0.2
    forge = SimpleNamespace(golden_capacity_per_level=2, warning_capacity_per_level=3, max_distill_weight=0.6)
    assert library_distillation_weight(5, forge) == pytest.approx(0.2)
    assert library_distillation_weight(0, forge) == 0.0
    assert library_distillation_weight(40, forge) == pytest.approx(0.6)


def step(messages, plain, prompt, response):
    return StepRecord(uid="g", traj_uid=f"t{len(prompt)}", step=0, anchor_obs="", messages=messages,
                      plain_messages=plain, response_text="", action="", prompt_ids=prompt, response_ids=response,
                      logprobs=[0.0] * len(response), reward=0.0, is_action_valid=True, done=True)


def test_distillation_rows_are_the_steps_whose_prompt_carried_experiences():
    plain = [{"role": "user", "content": "obs"}]
    with_library = [{"role": "system", "content": "lesson"}, *plain]
    steps = [step(with_library, plain, [5, 6, 7], [8, 9]), step(plain, plain, [5, 7], [9]),
             step(with_library, plain, [4, 6, 7], [8])]
    trajectories = [TrajectoryRecord(uid="g", traj_uid=s.traj_uid, task="", task_type=None, steps=[s],
                                     episode_reward=0.0, success=False, length=1) for s in steps]
    batch = build_step_batch(RolloutBatch(steps, trajectories), 0, 0.0)
    encode = {"obs": [1, 2]}  # the student's prompt: the plain messages' ids
    inputs = DistillationInputs.of_batch(batch, lambda m: (encode[m[-1]["content"]], None), 0, 0.5, "reverse_kl", 1.0)
    distilled = [batch.records[i].prompt_ids for i in inputs.rows.tolist()]
    assert sorted(distilled) == [[4, 6, 7], [5, 6, 7]]
    p = inputs.plain.prompt_length
    assert inputs.plain.input_ids[:, :p][inputs.plain.attention_mask[:, :p].bool()].view(2, -1).tolist() == [[1, 2]] * 2
    assert [r.response_ids for r in (batch.records[i] for i in inputs.rows.tolist())] == \
        [inputs.privileged.responses[k][inputs.privileged.response_mask[k].bool()].tolist() for k in range(2)]
    assert DistillationInputs.of_batch(batch, lambda m: ([1], None), 0, 0.0, "reverse_kl", 1.0) is None  # weight 0
    assert not distilled_step(plain, plain) and distilled_step(with_library, plain)

"""Distillation divergences against hand formulas, their gradients, temperature scaling and the weight ramp."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.distillation import distillation_loss, distillation_weight, token_divergence


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

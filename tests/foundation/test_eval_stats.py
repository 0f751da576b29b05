"""The evaluation's figures against hand-worked values and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.commands.eval.stats import bootstrap_mean_interval, paired_difference, success_figures, wilson_interval


def test_wilson_interval_hand_worked():
    # 5 of 10: centre 0.5, half-width 1.96 * sqrt(0.025 + 1.96^2 / 400) / (1 + 1.96^2 / 10) = 0.2634
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    # 0 of 4: the upper end is z^2 / (n + z^2)
    assert wilson_interval(0, 4) == pytest.approx((0.0, 1.959964 ** 2 / (4 + 1.959964 ** 2)), abs=1e-6)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_avg_and_pass_at_k_hand_worked():
    figures = success_figures(np.array([[1, 0], [0, 0], [1, 1]]))
    assert (figures["tasks"], figures["samples"]) == (3, 2)
    assert figures["avg@k"] == pytest.approx(0.5)  # (0.5 + 0 + 1) / 3
    assert figures["pass@k"] == pytest.approx(2 / 3)
    assert figures["pass@k_interval"] == pytest.approx(list(wilson_interval(2, 3)))
    low, high = figures["avg@k_interval"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0


def test_paired_difference_hand_worked():
    first, second = np.array([[1, 1], [0, 0], [0, 1]]), np.array([[0, 1], [0, 0], [1, 1]])
    diff = paired_difference(first, second)
    assert diff["difference"] == pytest.approx((0.5 + 0 - 0.5) / 3)
    assert (diff["tasks_better"], diff["tasks_worse"], diff["tasks_tied"]) == (1, 1, 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_the_bootstrap_interval_lies_within_the_tasks_range_and_holds_a_constant(values):
    per_task = np.array(values)
    low, high = bootstrap_mean_interval(per_task)
    assert per_task.min() - 1e-12 <= low <= high <= per_task.max() + 1e-12
    constant = np.full(len(values), values[0])
    assert bootstrap_mean_interval(constant) == pytest.approx((values[0], values[0]))


def test_bad_success_matrices_are_refused():
    with pytest.raises(ValueError, match="0 or 1"):
        success_figures(np.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="shape"):
        success_figures(np.array([1, 0]))
    with pytest.raises(ValueError, match="same episodes"):
        paired_difference(np.ones((2, 2)), np.ones((2, 3)))

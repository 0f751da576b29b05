"""``trainer.local.freeze_policy``: the library alone on a frozen policy (rollouts and evolution, no update); and
step-credit lessons on the embedded engine."""

import pytest
import torch

from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(300)


def test_a_frozen_policy_keeps_its_weights_while_the_library_evolves(compose_cfg, run_overrides, tmp_path,
                                                                     taught_policy):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=2) + ["trainer.local.freeze_policy=true"])
    before = {name: p.detach().clone() for name, p in taught_policy.model.named_parameters()}
    trainer = LocalTrainer(validate(cfg), Components(policy=taught_policy))
    history = trainer.fit()

    assert [row["iteration"] for row in history] == [1, 2]
    after = dict(taught_policy.model.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert all(not any(key.startswith("actor/") for key in row) for row in history)  # no update, no lr step
    assert history[-1]["forge/library_total_size"] > 0  # evolution ran
    assert all("success_rate" in row and "timing_s/gen" in row for row in history)


def test_the_same_run_unfrozen_changes_the_weights(compose_cfg, run_overrides, tmp_path, taught_policy):
    """The contrast that makes the test above mean something: the same config updates the policy."""
    cfg = compose_cfg(run_overrides(tmp_path, iterations=1))
    before = {name: p.detach().clone() for name, p in taught_policy.model.named_parameters()}
    LocalTrainer(validate(cfg), Components(policy=taught_policy)).fit()
    after = dict(taught_policy.model.named_parameters())
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_step_credit_lessons_run_on_the_embedded_engine(compose_cfg, run_overrides, tmp_path, taught_policy):
    """lesson_credit=step needs the algorithm's gamma and penalty: the embedded trainer builds its system from
    the algorithm section, so the run trains and evolves (before, it stopped at start-up)."""
    cfg = compose_cfg(run_overrides(tmp_path, iterations=2) + ["algorithm.forge.lesson_credit=step"])
    history = LocalTrainer(validate(cfg), Components(policy=taught_policy)).fit()
    assert [row["iteration"] for row in history] == [1, 2]
    assert "forge/extractor_credit_states" in history[-1]


def test_the_library_effect_line_compares_the_two_validation_passes():
    from recipe.forge.runs.validation import library_effect

    metrics = {"val/success_rate": 0.75, "val_no_library/success_rate": 0.5, "val/num_trajectories": 64.0,
               "val/forge/lesson_precision": 0.9}
    assert library_effect(metrics) == ("validation on 64 held-out episodes: success 0.750 with the library, 0.500 "
                                       "without it (+0.250); precision of the lessons shown 0.900")
    assert library_effect({"val/success_rate": 0.5}) is None  # a baseline validates once, without a library

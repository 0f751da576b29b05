"""scripts/bench_overhead.py runs on the shipped config (it broke silently once the KL loss became the default)."""

import pytest

pytestmark = pytest.mark.timeout(600)


def test_one_tiny_iteration_reports_the_share_of_its_own_phases(load_script, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the benchmark's run folder goes
    result = load_script("bench_overhead.py").run(iterations=1, tasks=1, group=2, env_name="gym_cards/NumberLine-v0",
                                                   max_steps=2, max_new_tokens=4)
    phases = result["phase_seconds"]
    assert set(phases) == {"forge_retrieval", "adv", "forge_evolution", "gen", "prepare", "update_actor"}
    forge = phases["forge_retrieval"] + phases["adv"] + phases["forge_evolution"]
    assert 0.0 < result["forge_share_of_iteration"] < 1.0
    # phase_seconds are rounded to 4 decimals (+-5e-5 each): the share must lie within what rounding allows
    total, slack = sum(phases.values()), 5e-5
    low = (forge - 3 * slack) / (total + 6 * slack)
    high = (forge + 3 * slack) / (total - 6 * slack)
    assert low <= result["forge_share_of_iteration"] <= high
    # the run folder goes with the figures (before, every run left one in /tmp)
    assert [p.name for p in tmp_path.glob("bench_overhead_*")] == []

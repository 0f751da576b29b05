"""scripts/bench_async.py's figures from its runs' metrics rows, on hand-made rows (the benchmark itself trains
three modes x seeds with SmolLM2-135M; docs/distributed.md holds its measurement)."""

from __future__ import annotations

import pytest


def rows(steps_s, gen_s, samples, success, busy=None, staleness=None):
    out = []
    for i, (step, gen, n, won) in enumerate(zip(steps_s, gen_s, samples, success)):
        row = {"iteration": i + 1, "timing_s/step": step, "timing_s/gen": gen, "num_steps": n,
               "num_trajectories": n / 2, "success_rate": won}
        if busy is not None:
            row["forge/rollout_busy_share"] = busy[i]
        if staleness is not None:
            row["forge/staleness_max"], row["forge/staleness_mean"] = staleness[i], staleness[i] / 2
        out.append(row)
    return out


def test_the_benchmark_reports_rates_waits_and_the_curve_against_sync(load_script):
    bench = load_script("bench_async.py")
    sync = [bench.run_figures(rows([100, 80], [40, 40], [20, 20], [0.0, 0.5], [0.4, 0.4], [0, 0]), 300.0),
            bench.run_figures(rows([60, 60], [30, 30], [20, 20], [0.5, 0.5], [0.6, 0.6], [0, 0]), 250.0)]
    colocate = [bench.run_figures(rows([50, 50], [5, 5], [20, 20], [0.0, 1.0], [0.8, 0.8], [0, 1]), 200.0),
                bench.run_figures(rows([50, 50], [5, 5], [20, 20], [0.5, 1.0], [0.9, 0.9], [1, 2]), 200.0)]
    summary = bench.summarise({"sync": sync, "colocate_async": colocate})
    # 80 samples in 300 s of training against 80 in 200 s
    assert summary["sync"]["samples_per_hour"] == pytest.approx(3600 * 80 / 300)
    assert summary["colocate_async"]["samples_per_hour"] == pytest.approx(3600 * 80 / 200)
    assert summary["ratio_vs_sync"] == {"colocate_async": pytest.approx(1.5)}
    assert summary["sync"]["trainer_wait_share"] == pytest.approx((80 / 180 + 60 / 120) / 2)
    assert summary["colocate_async"]["rollout_busy_share"] == pytest.approx(0.85)
    assert summary["colocate_async"]["rollout_wait_share"] == pytest.approx(0.15)
    assert summary["colocate_async"]["staleness_max"] == 2 and summary["sync"]["staleness_max"] == 0
    assert summary["sync"]["learning_curve"] == [0.25, 0.5] and summary["colocate_async"]["learning_curve"] == [0.25, 1.0]
    assert summary["colocate_async"]["wall_s"] == [200.0, 200.0]


def test_each_mode_runs_the_documented_cpu_job_with_its_own_key(load_script):
    bench = load_script("bench_async.py")
    assert bench.JOB.name == "run_numberline_cpu.sh" and bench.JOB.exists()
    assert bench.mode_overrides("sync") == ["trainer.v1.trainer_mode=sync"]
    separate = bench.mode_overrides("separate_async")
    assert "actor_rollout_ref.rollout.nnodes=1" in separate and "actor_rollout_ref.hybrid_engine=false" in separate

"""scripts/bench_episode_pool.py and scripts/bench_library_refresh.py: what they count and report (figures
themselves are measured by running the scripts, never asserted here)."""

from __future__ import annotations

import json
import sys

import pytest


def test_episode_pool_bench_counts_one_manager_per_concurrent_episode(load_script, monkeypatch, capsys):
    bench = load_script("bench_episode_pool.py")
    argv = ["bench_episode_pool.py", "--env", "sokoban", "--episodes", "6", "--concurrency", "2", "--json"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    (line,) = capsys.readouterr().out.strip().splitlines()
    result = json.loads(line)
    assert result["fresh"]["managers_built"] == 6 and result["pooled"]["managers_built"] == 2
    assert result["fresh"]["worker_processes_started"] == 0  # Sokoban runs in-process
    assert result["pooled"]["seconds_per_episode"] > 0 and result["speedup"] > 0


def test_episode_pool_bench_rejects_bad_counts(load_script, monkeypatch):
    bench = load_script("bench_episode_pool.py")
    monkeypatch.setattr(sys, "argv", ["bench_episode_pool.py", "--episodes", "0"])
    with pytest.raises(SystemExit, match="must be >= 1"):
        bench.main()


def test_library_refresh_bench_reports_both_snapshot_forms(load_script):
    bench = load_script("bench_library_refresh.py")
    row = bench.measure(300)
    assert row["clusters"] == 300
    for form in ("plain", "with_search"):
        for key in ("driver_snapshot_s", "mb", "worker_load_s", "worker_load_cpu_s", "refresh_s", "max_loop_stall_s"):
            assert row[f"{form}_{key}"] > 0, (form, key)
        assert row[f"{form}_max_loop_stall_s"] <= row[f"{form}_refresh_s"]
    assert row["with_search_mb"] > row["plain_mb"]  # the search travels along

"""scripts/bench_episode_pool.py and scripts/bench_library_refresh.py: what they count and report (figures
themselves are measured by running the scripts, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_library_refresh_bench_publishes_once_and_reports_each_worker():
    """The script as run (its Ray actors must be pickled by value, as from ``__main__``): one JSON line per size
    with the driver's publication and, per worker, the version it loaded and what the load cost."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_library_refresh.py"
    out = subprocess.run([sys.executable, str(script), "--clusters", "200", "--workers", "2", "--json"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    (line,) = out.strip().splitlines()
    row = json.loads(line)
    assert row["clusters"] == 200 and row["publish_s"] >= row["snapshot_s"] > 0 and row["snapshot_mb"] > 0
    assert len(row["workers"]) == 2
    for worker in row["workers"]:
        assert worker["clusters"] == 200 and worker["version"] == 0
        assert 0 < worker["max_loop_stall_s"] <= worker["load_s"] and worker["load_cpu_s"] > 0
        assert worker["peak_rss_mb"] >= worker["rss_before_mb"] > 0 and worker["longest_gc_s"] >= 0

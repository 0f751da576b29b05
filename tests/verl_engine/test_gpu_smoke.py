"""GPU-only: scripts/gpu_smoke.sh trains 2 iterations on Sokoban with vLLM + FSDP and reports its figures."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_gpu_smoke_script_is_a_valid_run_config(load_script):
    module = load_script("check_examples.py")
    assert module.main(["-q", str(REPO / "scripts" / "gpu_smoke.sh")]) == 0


def test_gpu_smoke_injects_experiences_before_its_last_iteration(load_script):
    """The smoke run is there to show experiences going through vLLM: both gates (warm-up and library size) open
    within its iterations, so at least its last iteration injects."""
    module = load_script("check_examples.py")
    [command] = [c for c in module.extract_commands(REPO / "scripts" / "gpu_smoke.sh") if c.overrides]
    cfg = module.compose(command)
    forge = cfg.algorithm.forge
    assert forge.warmup_iterations < cfg.trainer.total_training_steps
    assert forge.min_library_size == 0


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_gpu_smoke_runs_two_iterations(tmp_path):
    proc = subprocess.run(
        ["bash", "scripts/gpu_smoke.sh"], cwd=REPO, env={**__import__("os").environ, "OUT": str(tmp_path)},
        capture_output=True, text=True, timeout=1700,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    figures = re.findall(r"gpu_smoke iteration (\d+): ([0-9.]+) s, rollout ([0-9]+) tokens/s", proc.stdout)
    assert [f[0] for f in figures] == ["1", "2"]
    assert all(float(f[1]) > 0 and int(f[2]) > 0 for f in figures)

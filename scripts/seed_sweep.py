"""SLEA-RL against GiGPO and GRPO over seeds, at one budget: runs the main job per estimator x seed and writes
the per-seed final figures.

Every run is ``python -m recipe.forge.main_forge +experiment=main_job`` with the estimator, ``env.seed``, the
iteration budget (validation once, after the last iteration, on ``--val-tasks`` held-out tasks x G copies) and
its own run folder under ``--runs-dir`` (with every training step in ``rollouts/<iteration>.jsonl``, for
scripts/analyze_numberline_sweep.py); ``--parallel`` runs go at a time, one thread each. Extra Hydra
overrides after ``--`` apply to every run (e.g. a model path). The output file holds, per estimator and seed::

    {"forge": {"0": {"val_success": 0.5, "val_success_no_library": 0.4375, "train_success_last": 0.25}, ...},
     "gigpo": {...}, "grpo": {...}}

``val_success_no_library`` is null for estimators without a library. A run that fails stops the sweep with its
log's tail. The full sweep of the issue (3 estimators x 3 seeds):

    .venv/bin/python scripts/seed_sweep.py --seeds 0 1 2 --iterations 12 --val-tasks 12 --parallel 3 \\
        --out docs/results/main_job_seeds.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ESTIMATORS = ("forge", "gigpo", "grpo")
REPO = Path(__file__).resolve().parents[1]


def run_overrides(estimator: str, seed: int, iterations: int, val_tasks: int, run_dir: Path) -> list[str]:
    """The Hydra overrides of one run of the sweep."""
    return [
        "+experiment=main_job", f"algorithm.adv_estimator={estimator}", f"env.seed={seed}",
        f"trainer.total_training_steps={iterations}", f"trainer.test_freq={iterations}",
        f"data.val_batch_size={val_tasks}", "trainer.save_freq=-1", "trainer.val_before_train=false",
        f"trainer.default_local_dir={run_dir}", f"algorithm.forge.checkpoint_dir={run_dir}/library",
        f"trainer.rollout_data_dir={run_dir}/rollouts",
        f"trainer.experiment_name=seeds_{estimator}_{seed}", "trainer.local.num_threads=1",
        "trainer.local.progress=false", "trainer.logger=[jsonl]",
    ]


def final_figures(metrics_file: Path) -> dict[str, float | None]:
    """val_success, val_success_no_library (None when the run has none) and train_success_last of one run's
    metrics.jsonl: the last validation and the last iteration's training success."""
    from recipe.forge.engines.local.tracking import read_metrics  # former metric names read as current ones

    rows = read_metrics(metrics_file)
    if not rows:
        raise ValueError(f"{metrics_file} holds no iteration")
    validated = [r for r in rows if "val/success_rate" in r]
    if not validated:
        raise ValueError(f"{metrics_file} holds no validation (val/success_rate)")
    last_val = validated[-1]
    no_library = last_val.get("val_no_library/success_rate")
    return {"val_success": float(last_val["val/success_rate"]),
            "val_success_no_library": None if no_library is None else float(no_library),
            "train_success_last": float(rows[-1]["success_rate"])}


def run_one(estimator: str, seed: int, args: argparse.Namespace, extra: list[str]) -> dict[str, float | None]:
    run_dir = (args.runs_dir / f"{estimator}_seed{seed}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "recipe.forge.main_forge",
               *run_overrides(estimator, seed, args.iterations, args.val_tasks, run_dir), *extra]
    log = run_dir / "sweep.log"
    with log.open("w") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise RuntimeError(f"{estimator} seed {seed} failed (exit {done.returncode}); {log}:\n{tail}")
    return final_figures(run_dir / "metrics.jsonl")


def summary(results: dict[str, dict[str, dict]]) -> str:
    lines = [f"{'estimator':>9} | {'val success (mean +- sd)':>25} | {'val without library':>20} | {'train last':>15}"]
    for estimator, seeds in results.items():
        def stat(key: str) -> str:
            values = [s[key] for s in seeds.values() if s[key] is not None]
            if not values:
                return "-"
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.fmean(values):.3f} +- {sd:.3f}"
        lines.append(f"{estimator:>9} | {stat('val_success'):>25} | {stat('val_success_no_library'):>20} | "
                     f"{stat('train_success_last'):>15}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimators", nargs="+", default=list(ESTIMATORS), choices=ESTIMATORS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--val-tasks", type=int, default=12, help="held-out tasks in the final validation")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "seed_sweep")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "main_job_seeds.json")
    args = parser.parse_args(argv)
    jobs = [(e, s) for s in args.seeds for e in args.estimators]  # a seed's estimators run side by side
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        figures = list(pool.map(lambda job: run_one(*job, args, extra), jobs))
    results: dict[str, dict[str, dict]] = {}
    for (estimator, seed), fig in zip(jobs, figures):
        results.setdefault(estimator, {})[str(seed)] = fig
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(summary(results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SLEA-RL against GiGPO and GRPO over seeds, at one budget: runs a preset per method x seed and writes the
per-seed final figures, their means with standard errors, and paired comparisons.

Every run is ``python -m recipe.forge.main_forge +experiment=<preset>`` (``--preset``, default the main job) with
the method's overrides, ``env.seed``, the iteration budget (validation once, after the last iteration, on
``--val-tasks`` held-out tasks x G copies) and its own run folder under ``--runs-dir`` (with every training and
validation step under ``rollouts/``, for scripts/analyze_numberline_sweep.py); ``--parallel`` runs go at a time,
one thread each. Extra Hydra overrides after ``--`` apply to every run (e.g. a model path).

Methods (``--methods``, formerly ``--estimators``): ``forge`` (SLEA-RL), ``gigpo`` (as published), ``grpo``;
``forge_paper`` (SLEA-RL with the paper's step part: discounted step returns, ``algorithm.forge.step_value=return``),
``gigpo_fix`` (GiGPO whose step part values what an action led to, ``algorithm.gigpo.step_value=next_state``: the
step-credit fix without the library), ``forge_distill`` (SLEA-RL with self-distillation, the library as privileged
information, ``algorithm.forge.use_distillation=true``); ``oracle`` (SLEA-RL
whose lessons come from the environment's expert at every visited state, ``algorithm.forge.extractor=oracle``:
the most injection can give this policy, the ceiling); ``forge_outcome`` and ``forge_step`` (SLEA-RL with the
paper's outcome-credited lessons, and with step-credited ones: ``algorithm.forge.lesson_credit``); ``forge_timed``
(SLEA-RL whose step groups are one cluster at one turn, ``algorithm.forge.step_groups=cluster_and_turn``); ``forge_frozen`` (the library alone: SLEA-RL's library
evolving over a frozen policy, ``trainer.local.freeze_policy=true``) and ``frozen`` (the same frozen policy
without a library). The output file holds, per method and seed::

    {"forge": {"0": {"val_success": 0.5, "val_success_no_library": 0.4375, "train_success_last": 0.25,
                     "lesson_precision": 0.9, "val_lesson_precision": 0.8, "val_valid_action_ratio": 1.0}, ...},
     "gigpo": {...}, "grpo": {...}, "oracle": {...}}

``val_success_no_library``, ``lesson_precision`` and ``val_lesson_precision`` are null for methods without a
library (precision: the last logged ``forge/lesson_precision`` in training, and the last validation's
``val/forge/lesson_precision``; null where no lesson could be checked). ``--summary`` writes the means,
standard errors and the paired comparisons of ``forge`` with every other method (per-seed differences: mean,
standard error, and whether it exceeds two standard errors), and where SLEA-RL falls between the floor
(``gigpo``) and the ceiling (``oracle``). A run that fails stops the sweep with its log's tail.

Every run writes a checkpoint every ``--save-freq`` iterations (the newest kept) and runs with
``trainer.resume_mode=auto``. Its folder's ``sweep_command.json`` records the command, the iteration budget and,
once the run finished, a digest of its metrics. With ``--reuse`` a run is taken as it is only when that record
says the same command finished, the metrics still have that digest and they end with the budget's last iteration
and its validation; a run of the same command that did not finish is run again and continues from its last
checkpoint (a sweep spans several sessions); a folder holding anything else (another command, a damaged record,
metrics changed since) is moved aside to ``<folder>.replaced-<n>`` and the run starts afresh. Without
``--reuse`` every run starts afresh, its old folder moved aside likewise. A finished run's checkpoints are deleted
unless ``--keep-checkpoints`` (a SmolLM2 checkpoint with its optimizer is about 1.6 GB). Example:

    .venv/bin/python scripts/seed_sweep.py --methods forge gigpo grpo oracle --seeds 0 1 2 3 4 --iterations 12 \
        --val-tasks 16 --parallel 2 --out docs/results/seeds_numberline.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

METHODS: dict[str, tuple[str, ...]] = {
    "forge": ("algorithm.adv_estimator=forge",),
    "forge_paper": ("algorithm.adv_estimator=forge", "algorithm.forge.step_value=return"),
    "forge_distill": ("algorithm.adv_estimator=forge", "algorithm.forge.use_distillation=true"),
    "gigpo": ("algorithm.adv_estimator=gigpo",),
    "gigpo_fix": ("algorithm.adv_estimator=gigpo", "algorithm.gigpo.step_value=next_state"),
    "grpo": ("algorithm.adv_estimator=grpo",),
    "oracle": ("algorithm.adv_estimator=forge", "algorithm.forge.extractor=oracle",
               "algorithm.forge.lesson_credit=outcome"),
    "forge_outcome": ("algorithm.adv_estimator=forge", "algorithm.forge.lesson_credit=outcome"),
    "forge_step": ("algorithm.adv_estimator=forge", "algorithm.forge.lesson_credit=step"),
    "forge_timed": ("algorithm.adv_estimator=forge", "algorithm.forge.step_groups=cluster_and_turn"),
    "forge_frozen": ("algorithm.adv_estimator=forge", "trainer.local.freeze_policy=true"),
    "frozen": ("algorithm.adv_estimator=gigpo", "trainer.local.freeze_policy=true"),
}
DEFAULT_METHODS = ("forge", "gigpo", "grpo")
FIGURES = ("val_success", "val_success_no_library", "train_success_last", "lesson_precision", "val_lesson_precision",
           "val_valid_action_ratio")
FLOOR, CEILING = "gigpo", "oracle"
REPO = Path(__file__).resolve().parents[1]


def run_overrides(method: str, seed: int, iterations: int, val_tasks: int, run_dir: Path,
                  preset: str = "main_job", save_freq: int = 5, val_every: int | None = None) -> list[str]:
    """The Hydra overrides of one run of the sweep (validation every ``val_every`` iterations and after the last)."""
    return [
        f"+experiment={preset}", *METHODS[method], f"env.seed={seed}",
        f"trainer.total_training_steps={iterations}", f"trainer.test_freq={val_every or iterations}",
        f"data.val_batch_size={val_tasks}", f"trainer.save_freq={save_freq}", "trainer.max_actor_ckpt_to_keep=1",
        "trainer.resume_mode=auto", "trainer.val_before_train=false",
        f"trainer.default_local_dir={run_dir}", f"algorithm.forge.checkpoint_dir={run_dir}/library",
        f"trainer.rollout_data_dir={run_dir}/rollouts",
        f"trainer.experiment_name=seeds_{method}_{seed}", "trainer.local.num_threads=1",
        "trainer.local.progress=false", "trainer.logger=[jsonl]",
    ]


def final_figures(metrics_file: Path, iterations: int | None = None) -> dict[str, float | None]:
    """val_success, val_success_no_library (None when the run has none), train_success_last, lesson_precision (the
    last logged ``forge/lesson_precision``, None when never logged), val_lesson_precision and
    val_valid_action_ratio (the last validation's) of one run's metrics.jsonl. With ``iterations``, a ValueError
    unless the metrics hold iterations 1..``iterations`` in order, the last one validated (an interrupted run, a torn
    last line or a shorter budget is no final figure)."""
    from recipe.forge.runs.tracking import read_metrics  # former metric names read as current ones

    rows = read_metrics(metrics_file)
    if not rows:
        raise ValueError(f"{metrics_file} holds no iteration")
    if iterations is not None:
        seen = [r.get("iteration") for r in rows]
        if seen != list(range(1, iterations + 1)):
            last = seen[-1] if seen else None
            raise ValueError(f"{metrics_file} holds iterations up to {last}, not 1..{iterations} in order")
        if "val/success_rate" not in rows[-1]:
            raise ValueError(f"{metrics_file}: iteration {iterations} has no validation (val/success_rate)")
    validated = [r for r in rows if "val/success_rate" in r]
    if not validated:
        raise ValueError(f"{metrics_file} holds no validation (val/success_rate)")
    last_val = validated[-1]

    def optional(key: str) -> float | None:
        return None if last_val.get(key) is None else float(last_val[key])

    precision = [r["forge/lesson_precision"] for r in rows if r.get("forge/lesson_precision") is not None]
    return {"val_success": float(last_val["val/success_rate"]),
            "val_success_no_library": optional("val_no_library/success_rate"),
            "train_success_last": float(rows[-1]["success_rate"]),
            "lesson_precision": float(precision[-1]) if precision else None,
            "val_lesson_precision": optional("val/forge/lesson_precision"),
            "val_valid_action_ratio": optional("val/valid_action_ratio")}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_record(path: Path) -> dict | None:
    """A run folder's sweep record, or None where there is none or it is not one (damaged, foreign)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("command"), list):
        return None
    return record


def finished_figures(record: dict, command: list[str], iterations: int, run_dir: Path) -> dict | None:
    """The figures of a finished run of ``command`` the record vouches for, else None."""
    metrics = run_dir / "metrics.jsonl"
    if record.get("command") != command or record.get("iterations") != iterations or not metrics.is_file():
        return None
    if record.get("metrics_sha256") != digest(metrics):
        return None
    try:
        return final_figures(metrics, iterations)
    except ValueError:
        return None


def move_aside(run_dir: Path) -> Path:
    """Move a run folder that holds something else out of the way (never delete): ``<folder>.replaced-<n>``."""
    n = 1
    while (target := run_dir.with_name(f"{run_dir.name}.replaced-{n}")).exists():
        n += 1
    run_dir.rename(target)
    return target


def run_one(method: str, seed: int, args: argparse.Namespace, extra: list[str]) -> dict[str, float | None]:
    run_dir = (args.runs_dir / f"{method}_seed{seed}").resolve()
    command = [sys.executable, "-m", "recipe.forge.main_forge",
               *run_overrides(method, seed, args.iterations, args.val_tasks, run_dir, args.preset, args.save_freq,
                              args.val_every), *extra]
    record_path = run_dir / "sweep_command.json"
    record = read_record(record_path) if args.reuse else None
    if record is not None:
        figures = finished_figures(record, command[1:], args.iterations, run_dir)
        if figures is not None:
            return figures
    same_run = record is not None and record.get("command") == command[1:] and "metrics_sha256" not in record
    if run_dir.exists() and any(run_dir.iterdir()) and not same_run:
        moved = move_aside(run_dir)
        print(f"{method} seed {seed}: {run_dir} held another run; moved to {moved.name}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps({"command": command[1:], "iterations": args.iterations}) + "\n")
    log = run_dir / "sweep.log"
    with log.open("a") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise RuntimeError(f"{method} seed {seed} failed (exit {done.returncode}); {log}:\n{tail}")
    figures = final_figures(run_dir / "metrics.jsonl", args.iterations)
    record_path.write_text(json.dumps({"command": command[1:], "iterations": args.iterations,
                                       "metrics_sha256": digest(run_dir / "metrics.jsonl")}) + "\n")
    if not args.keep_checkpoints:
        for folder in run_dir.glob("global_step_*"):
            shutil.rmtree(folder)
    return figures


def mean_and_se(values: list[float]) -> dict[str, float | int]:
    """Mean, standard error (sample sd / sqrt(n); 0 for one value) and n."""
    n = len(values)
    se = statistics.stdev(values) / n ** 0.5 if n > 1 else 0.0
    return {"mean": statistics.fmean(values), "se": se, "n": n}


def per_seed(results: dict[str, dict[str, dict]], method: str, key: str = "val_success") -> dict[str, float | None]:
    """{seed: the method's figure ``key``}."""
    return {seed: figures.get(key) for seed, figures in results.get(method, {}).items()}


def paired(a: dict[str, float | None], b: dict[str, float | None]) -> dict | None:
    """``a`` - ``b`` over the seeds where both have a figure: the per-seed differences' mean and standard error,
    and whether the mean lies more than two standard errors above or below 0 (None when no seed is shared)."""
    seeds = sorted((s for s in set(a) & set(b) if a[s] is not None and b[s] is not None), key=int)
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    stats = mean_and_se(diffs)
    return {**stats, "seeds": seeds, "diffs": diffs,
            "above_two_se": stats["n"] > 1 and stats["mean"] > 2 * stats["se"],
            "below_two_se": stats["n"] > 1 and stats["mean"] < -2 * stats["se"]}


def summarise(results: dict[str, dict[str, dict]]) -> dict:
    """Per method: mean and standard error of every figure; ``forge`` paired with every other method and with
    itself without its library; with the floor and ceiling present, where SLEA-RL's mean falls between them
    ((forge - floor) / (ceiling - floor))."""
    out: dict = {"methods": {}, "paired": {}}
    for method, seeds in results.items():
        figures = {}
        for key in FIGURES:
            values = [f[key] for f in seeds.values() if f.get(key) is not None]
            figures[key] = mean_and_se(values) if values else None
        out["methods"][method] = figures
    if "forge" in results:
        ours = per_seed(results, "forge")
        for other in results:
            if other != "forge":
                out["paired"][f"forge-{other}"] = paired(ours, per_seed(results, other))
        out["paired"]["forge-forge_no_library"] = paired(ours, per_seed(results, "forge", "val_success_no_library"))
    if {"forge", FLOOR, CEILING} <= set(results):
        floor, ceiling, mean = (out["methods"][m]["val_success"]["mean"] for m in (FLOOR, CEILING, "forge"))
        out["between_floor_and_ceiling"] = (mean - floor) / (ceiling - floor) if ceiling != floor else None
    return out


def summary(results: dict[str, dict[str, dict]]) -> str:
    """The printed table: mean +- standard error per method and figure, then the paired comparisons."""
    stats = summarise(results)
    heads = ("val success", "val no library", "train last", "precision", "val precision", "val valid")
    lines = [f"{'method':>14} | " + " | ".join(f"{h:>15}" for h in heads)]
    for method, figures in stats["methods"].items():
        cells = [f"{f['mean']:.3f} +- {f['se']:.3f}" if f else "-" for f in figures.values()]
        lines.append(f"{method:>14} | " + " | ".join(f"{c:>15}" for c in cells))
    for name, comparison in stats["paired"].items():
        if comparison:
            verdict = ("above" if comparison["above_two_se"] else "below" if comparison["below_two_se"]
                       else "within")
            lines.append(f"paired {name}: {comparison['mean']:+.3f} +- {comparison['se']:.3f} over "
                         f"{comparison['n']} seeds ({verdict} two standard errors)")
    if stats.get("between_floor_and_ceiling") is not None:
        lines.append(f"SLEA-RL between floor ({FLOOR}) and ceiling ({CEILING}): {stats['between_floor_and_ceiling']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", "--estimators", dest="methods", nargs="+", default=list(DEFAULT_METHODS),
                        choices=list(METHODS))
    parser.add_argument("--preset", default="main_job", help="the experiment preset (recipe/forge/config/experiment)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--val-tasks", type=int, default=12, help="held-out tasks in the final validation")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "seed_sweep")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "main_job_seeds.json")
    parser.add_argument("--summary", type=Path, default=None, help="also write summarise()'s JSON here")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the figures of a finished run of the same command, continue an unfinished one "
                             "from its last checkpoint (a sweep spans sessions); anything else reruns afresh")
    parser.add_argument("--save-freq", type=int, default=5, help="checkpoint every this many iterations")
    parser.add_argument("--val-every", type=int, default=None,
                        help="also validate every this many iterations (default: after the last only)")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep a finished run's last checkpoint")
    args = parser.parse_args(argv)
    jobs = [(m, s) for s in args.seeds for m in args.methods]  # a seed's methods run side by side
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        figures = list(pool.map(lambda job: run_one(*job, args, extra), jobs))
    results: dict[str, dict[str, dict]] = {}
    for (method, seed), fig in zip(jobs, figures):
        results.setdefault(method, {})[str(seed)] = fig
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    if args.summary is not None:
        args.summary.write_text(json.dumps(summarise(results), indent=1) + "\n")
    print(summary(results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Plot training curves from one or more runs' metrics.jsonl (written in one format by every engine).

    python scripts/plot_training.py runs/slea_rl/forge_numberline/metrics.jsonl -o curve.png
    python scripts/plot_training.py SLEA-RL=runs/a/metrics.jsonl GRPO=runs/b/metrics.jsonl -o compare.png

    python scripts/plot_training.py SLEA-RL=runs/s/forge_seed0/metrics.jsonl SLEA-RL=runs/s/forge_seed1/metrics.jsonl \
        GRPO=runs/s/grpo_seed0/metrics.jsonl GRPO=runs/s/grpo_seed1/metrics.jsonl -o seeds.png

Panels: success rate and episode reward vs iteration (training rollouts; validation points as markers, filled
with the library, hollow squares for forge's pass without it), library size, valid-action ratio. Runs given the same label are seeds of one method: drawn as their mean with a
band from the lowest to the highest seed (validation: mean with a min-max bar), over the iterations every seed
reached. ``--max-iteration`` cuts every run at the same budget. ``--summary`` also writes the plotted series as
JSON (per label and key, iteration -> value; for seeds the mean, and the band under ``<key>/min``, ``<key>/max``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from recipe.forge.runs.tracking import read_metrics

PANELS = [  # (training key, the metric validations log or None, title)
    ("success_rate", "success_rate", "success rate"),
    ("episode_reward/mean", "episode_reward/mean", "episode reward (mean)"),
    ("forge/library_total_size", None, "library size (entries)"),
    ("valid_action_ratio", "valid_action_ratio", "valid-action ratio"),
]
# the validation passes: with the library (a baseline's only pass), and forge's pass of the same tasks without it
# (key prefix, legend, marker, face, size): the hollow square frames the circle where both passes scored the same
VALIDATIONS = (("val/", "validation", "o", None, 8),
               ("val_no_library/", "validation without the library", "s", "none", 12))


def load_run(path: str | Path, max_iteration: int | None = None) -> list[dict]:
    rows = read_metrics(path)
    if max_iteration is not None:
        rows = [r for r in rows if r.get("iteration", 0) <= max_iteration]
    return sorted(rows, key=lambda r: r.get("iteration", 0))


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["iteration"], r[key]) for r in rows if key in r]
    return [p[0] for p in points], [p[1] for p in points]


def seed_band(runs_rows: list[list[dict]], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(iterations every run has ``key`` at, mean, min, max over the runs at each)."""
    per_run = [dict(zip(*series(rows, key))) for rows in runs_rows]
    common = sorted(set.intersection(*(set(values) for values in per_run))) if per_run else []
    columns = [[values[i] for values in per_run] for i in common]
    return (common, [sum(c) / len(c) for c in columns], [min(c) for c in columns], [max(c) for c in columns])


def group_by_label(runs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Label -> its runs' paths, labels in first-seen order."""
    groups: dict[str, list[str]] = {}
    for label, path in runs:
        groups.setdefault(label, []).append(path)
    return groups


def parse_run_args(items: list[str]) -> list[tuple[str, str]]:
    runs = []
    for item in items:
        label, sep, path = item.partition("=")
        if not sep:
            label, path = Path(item).parent.name or item, item
        runs.append((label, path))
    return runs


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (window 1 = raw)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(runs: list[tuple[str, str]], output: str | Path, max_iteration: int | None = None, window: int = 1,
         title: str | None = None) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    summary: dict = {}
    styles = ["-", "--", ":", "-."]  # overlapping runs stay distinguishable
    for run_index, (label, paths) in enumerate(group_by_label(runs).items()):
        runs_rows = [load_run(path, max_iteration) for path in paths]
        summary[label] = {}
        for ax, (key, val_metric, name) in zip(axes.flat, PANELS):
            x, mean, low, high = seed_band(runs_rows, key)
            colour = None
            if x:
                shown = label if len(paths) == 1 else f"{label} (mean of {len(paths)}, min-max band)"
                line, = ax.plot(x, smooth(mean, window), styles[run_index % len(styles)], label=shown, linewidth=2)
                colour = line.get_color()
                summary[label][key] = dict(zip(x, mean))
                if len(paths) > 1:
                    ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
                    summary[label][f"{key}/min"], summary[label][f"{key}/max"] = dict(zip(x, low)), dict(zip(x, high))
            for prefix, what, marker, face, size in VALIDATIONS if val_metric else ():
                val_key = prefix + val_metric
                vx, vmean, vlow, vhigh = seed_band(runs_rows, val_key)
                if vx:
                    bars = [[m - lo for m, lo in zip(vmean, vlow)], [hi - m for m, hi in zip(vmean, vhigh)]]
                    points = ax.errorbar(vx, vmean, yerr=bars if len(paths) > 1 else None, fmt=marker, color=colour,
                                         markersize=size, alpha=0.8, capsize=4, label=f"{label} ({what})",
                                         markerfacecolor=face)
                    colour = colour or points.lines[0].get_color()
                    summary[label][val_key] = dict(zip(vx, vmean))
                    if len(paths) > 1:
                        summary[label][f"{val_key}/min"] = dict(zip(vx, vlow))
                        summary[label][f"{val_key}/max"] = dict(zip(vx, vhigh))
            ax.set_title(name)
            ax.set_xlabel("iteration")
    for ax in axes.flat:
        if ax.lines:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="metrics.jsonl paths, optionally LABEL=path")
    parser.add_argument("-o", "--output", default="training_curves.png")
    parser.add_argument("--max-iteration", type=int, default=None, help="cut every run at this iteration")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window over iterations")
    parser.add_argument("--title", default=None)
    parser.add_argument("--summary", default=None, help="also write the plotted series to this JSON file")
    args = parser.parse_args(argv)
    summary = plot(parse_run_args(args.runs), args.output, args.max_iteration, args.smooth, args.title)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1, sort_keys=True))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

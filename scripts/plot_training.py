"""Plot training curves from one or more runs' metrics.jsonl (written by the local and api engines).

    python scripts/plot_training.py runs/slea_rl/forge_numberline/metrics.jsonl -o curve.png
    python scripts/plot_training.py SLEA-RL=runs/a/metrics.jsonl GRPO=runs/b/metrics.jsonl -o compare.png

Panels: success rate and episode reward vs iteration (training rollouts, validation points as markers),
library size, valid-action ratio. ``--max-iteration`` cuts every run at the same budget. ``--summary`` also
writes the plotted series as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from recipe.forge.engines.local.tracking import read_metrics

PANELS = [
    ("success_rate", "val/success_rate", "success rate"),
    ("episode_reward/mean", "val/episode_reward/mean", "episode reward (mean)"),
    ("forge/library_total_size", None, "library size (entries)"),
    ("valid_action_ratio", "val/valid_action_ratio", "valid-action ratio"),
]


def load_run(path: str | Path, max_iteration: int | None = None) -> list[dict]:
    rows = read_metrics(path)
    if max_iteration is not None:
        rows = [r for r in rows if r.get("iteration", 0) <= max_iteration]
    return sorted(rows, key=lambda r: r.get("iteration", 0))


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["iteration"], r[key]) for r in rows if key in r]
    return [p[0] for p in points], [p[1] for p in points]


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
    for run_index, (label, path) in enumerate(runs):
        rows = load_run(path, max_iteration)
        summary[label] = {}
        for ax, (key, val_key, name) in zip(axes.flat, PANELS):
            x, y = series(rows, key)
            if x:
                line, = ax.plot(x, smooth(y, window), styles[run_index % len(styles)], label=label, linewidth=2)
                summary[label][key] = dict(zip(x, y))
                colour = line.get_color()
            else:
                colour = None
            if val_key:
                vx, vy = series(rows, val_key)
                if vx:
                    ax.plot(vx, vy, "o", color=colour, markersize=8, alpha=0.8, label=f"{label} (validation)")
                    summary[label][val_key] = dict(zip(vx, vy))
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

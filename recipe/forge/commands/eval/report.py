"""An evaluation's results: per-episode records in, the figures of each pass, JSON, Markdown and a console table out.

A pass's figures (:func:`pass_figures`): avg@k and pass@k with their intervals (stats.py), success per task
type where the environment has types, the valid-action ratio over all steps, steps per episode, the mean
episode reward and the failures by category. Passes over the same episodes are compared pairwise with the
checkpoint's library pass (:func:`comparisons`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from recipe.forge.runs.durable import write_text_atomic
from recipe.forge.commands.eval.stats import INTERVALS, paired_difference, success_figures
from recipe.forge.safe_text import markdown_text

EPISODES = "episodes.jsonl"
REPORT_JSON = "evaluation.json"
REPORT_MD = "evaluation.md"


def success_matrix(episodes: Sequence[dict[str, Any]], tasks: int, samples: int) -> np.ndarray:
    """(tasks, samples) 0/1: episode (task i, sample j)'s success at [i, j]."""
    matrix = np.full((tasks, samples), np.nan)
    for episode in episodes:
        matrix[episode["task"], episode["sample"]] = float(episode["success"])
    if np.isnan(matrix).any():
        raise ValueError("an evaluation pass is missing episodes")
    return matrix


def pass_figures(episodes: Sequence[dict[str, Any]], tasks: int, samples: int) -> dict[str, Any]:
    figures = success_figures(success_matrix(episodes, tasks, samples))
    steps = sum(e["length"] for e in episodes)
    figures.update({
        "episodes": len(episodes),
        "valid_action_ratio": sum(e["valid_actions"] for e in episodes) / steps if steps else None,
        "steps_per_episode": steps / len(episodes),
        "episode_reward": float(np.mean([e["reward"] for e in episodes])),
    })
    by_type: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        if episode["task_type"] is not None:
            by_type[str(episode["task_type"])].append(float(episode["success"]))
    figures["success_by_task_type"] = {name: float(np.mean(values)) for name, values in sorted(by_type.items())}
    failures: dict[str, int] = defaultdict(int)
    for episode in episodes:
        if episode["failure_reason"]:
            failures[episode["failure_reason"].split(":", 1)[0].strip()] += 1
    figures["failures"] = dict(sorted(failures.items()))
    return figures


def comparisons(by_pass: dict[str, list[dict[str, Any]]], tasks: int, samples: int) -> dict[str, Any]:
    """Each other pass against ``with_library`` (where both ran): the paired avg@k difference over the tasks."""
    if "with_library" not in by_pass:
        return {}
    base = success_matrix(by_pass["with_library"], tasks, samples)
    return {f"with_library - {name}": paired_difference(base, success_matrix(episodes, tasks, samples))
            for name, episodes in by_pass.items() if name != "with_library"}


def build_report(header: dict[str, Any], by_pass: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    tasks, samples = header["tasks"], header["samples"]
    return {**header, "intervals": INTERVALS,
            "passes": {name: pass_figures(episodes, tasks, samples) for name, episodes in by_pass.items()},
            "comparisons": comparisons(by_pass, tasks, samples)}


def _interval(values: Sequence[float]) -> str:
    return f"[{values[0]:.3f}, {values[1]:.3f}]"


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [["pass", "avg@k", "95% interval", "pass@k", "95% interval", "valid actions", "steps/episode"]]
    for name, figures in report["passes"].items():
        valid = figures["valid_action_ratio"]
        rows.append([name, f"{figures['avg@k']:.3f}", _interval(figures["avg@k_interval"]), f"{figures['pass@k']:.3f}",
                     _interval(figures["pass@k_interval"]), "n/a" if valid is None else f"{valid:.3f}",
                     f"{figures['steps_per_episode']:.2f}"])
    return rows


def console_table(report: dict[str, Any]) -> str:
    rows = table_rows(report)
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"{report['tasks']} tasks x {report['samples']} samples at temperature {report['temperature']}, "
                 f"seed {report['seed']}")
    for name, diff in report["comparisons"].items():
        lines.append(f"{name}: {diff['difference']:+.3f} {_interval(diff['difference_interval'])} "
                     f"(tasks better/worse/tied: {diff['tasks_better']}/{diff['tasks_worse']}/{diff['tasks_tied']})")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    rows = table_rows(report)
    out = [f"# Evaluation of {markdown_text(str(report['source']))}", "",
           f"{report['tasks']} held-out tasks x {report['samples']} samples, temperature {report['temperature']}, "
           f"seed {report['seed']}, environment {markdown_text(str(report['env']))}.", "",
           "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(markdown_text(cell) for cell in row) + " |" for row in rows[1:]]
    out += ["", "Intervals: " + "; ".join(f"{key}: {text}" for key, text in INTERVALS.items()) + "."]
    for name, figures in report["passes"].items():
        if figures["success_by_task_type"]:
            out += ["", f"Success by task type ({markdown_text(name)}):", ""]
            out += [f"- {markdown_text(task_type)}: {value:.3f}" for task_type, value in figures["success_by_task_type"].items()]
    if report["comparisons"]:
        out += ["", "Paired differences (same tasks and sample streams):", ""]
        for name, diff in report["comparisons"].items():
            out.append(f"- {markdown_text(name)}: {diff['difference']:+.3f} {_interval(diff['difference_interval'])}, "
                       f"tasks better/worse/tied {diff['tasks_better']}/{diff['tasks_worse']}/{diff['tasks_tied']}")
    return "\n".join(out) + "\n"


def write_report(out_dir: Path, report: dict[str, Any], episodes: Sequence[dict[str, Any]]) -> None:
    """``evaluation.json``, ``evaluation.md`` and ``episodes.jsonl`` (one line per episode and pass) in ``out_dir``,
    each replaced atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / EPISODES, "".join(json.dumps(e, sort_keys=True) + "\n" for e in episodes))
    write_text_atomic(out_dir / REPORT_JSON, json.dumps(report, indent=2, sort_keys=True) + "\n")
    write_text_atomic(out_dir / REPORT_MD, markdown(report))

"""What the policy tried and what the library showed it, per iteration, in a NumberLine seed sweep
(scripts/seed_sweep.py writes every run's training steps to ``<run>/rollouts/<iteration>.jsonl``).

NumberLine has two actions: ``+`` (right) and ``-`` (left). A state "needs ``-``" when its target lies left of the
current position (``Target: t``, ``Current: c`` with t < c). Per estimator and iteration, averaged over seeds:

* ``minus_tried``: share of the steps at states that need ``-`` whose action was ``-``;
* ``minus_wins``: episodes won with at least one ``-`` step (summed over seeds);
* for runs with a library (``--library-runs``, default the ``forge`` runs): among the steps at states that need
  ``-``, the share shown a lesson naming ``<action>-</action>`` (``shown_minus``), one naming ``<action>+</action>``
  (``shown_plus``), any lesson (``shown_any``), and the levels of what they were shown (entries per step, from
  the run's saved library; ``unsaved`` = pruned before or created after its last save).

Also, per run: the first iteration with a ``-`` win (null if none). Lessons are read from the prompt the
policy was given (``input``), so what is counted is what reached the model: the task prompt itself never holds a
tagged action (``<action>+</action>``), only a lesson does.

Validation (``<run>/rollouts/val/<iteration>.jsonl`` and ``val_no_library/<iteration>.jsonl``, written when the
run validates; section ``validation`` of each estimator, counts summed over seeds), per iteration and held-out
state (anchor observation), for each pass: ``steps`` at the state, ``success`` (share of them in won episodes),
``answered`` (actions taken; ``(invalid)`` for a malformed answer), and what the library showed there:
``shown_steps`` (steps shown any entry), ``levels`` (entries shown, by level), ``named`` (the actions the shown
lessons name for this very state: the entry's advice where the dump has it, else ``answer with <action>X</action>``
after the state the lesson quotes), ``told_steps`` (steps shown such a lesson) and ``followed`` (share of those
whose answer was a named action).

    .venv/bin/python scripts/analyze_numberline_sweep.py --runs-dir runs/seed_sweep --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

STATE = re.compile(r"Target:\s*(\d+)\s*Current:\s*(\d+)")
LESSON_AT_STATE = re.compile(r'at "(?P<state>[^"]*)",\s*answer with (?P<actions>(?:one of )?<action>[^<]*</action>'
                             r'(?:,\s*<action>[^<]*</action>)*)', re.IGNORECASE)
TAGGED = re.compile(r"<action>([^<]*)</action>")
VAL_PASSES = ("val", "val_no_library")
INVALID = "(invalid)"
NAMES_MINUS = "<action>-</action>"
NAMES_PLUS = "<action>+</action>"
RUN_NAME = re.compile(r"^(?P<estimator>[a-z_]+)_seed(?P<seed>\d+)$")


def needs_minus(observation: str) -> bool | None:
    """True when the state's target lies left of the current position; None if it is no NumberLine state."""
    match = STATE.search(observation)
    return None if match is None else int(match.group(1)) < int(match.group(2))


def read_iteration(path: Path) -> list[dict]:
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


def library_levels(run_dir: Path) -> dict[int, str]:
    """Entry id -> level from the run's saved library (empty when the run has none)."""
    path = run_dir / "library" / "experience_library.json"
    if not path.exists():
        return {}
    payload = json.loads(path.read_text())
    entries = payload.get("library", payload).get("entries", [])
    return {int(e["entry_id"]): e["level"] for e in entries}


def iteration_figures(lines: list[dict], levels: dict[int, str] | None) -> dict[str, float]:
    """The figures of one iteration's steps; ``levels`` None for a run without a library."""
    minus_states = [line for line in lines if needs_minus(line["observation"])]
    episodes: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        episodes[line["traj_uid"]].append(line)
    wins_with_minus = sum(1 for steps in episodes.values() if steps[0]["success"] and any(s["action"] == "-" for s in steps))
    out = {"minus_states": float(len(minus_states)), "minus_wins": float(wins_with_minus),
           "minus_tried": _share(minus_states, lambda s: s["action"] == "-")}
    if levels is not None:
        out["shown_minus"] = _share(minus_states, lambda s: NAMES_MINUS in s["input"])
        out["shown_plus"] = _share(minus_states, lambda s: NAMES_PLUS in s["input"])
        out["shown_any"] = _share(minus_states, lambda s: bool(s["experience_ids"]))
        counts: dict[str, int] = defaultdict(int)
        for step in minus_states:
            for raw in step["experience_ids"]:
                counts[levels.get(int(raw), "unsaved")] += 1
        for level, count in counts.items():
            out[f"level/{level}"] = count / max(len(minus_states), 1)
    return out


def _share(items: list[dict], predicate) -> float:
    return sum(1 for item in items if predicate(item)) / len(items) if items else float("nan")


def analyze_run(run_dir: Path, with_library: bool) -> dict:
    levels = library_levels(run_dir) if with_library else None
    files = sorted((run_dir / "rollouts").glob("*.jsonl"), key=lambda p: int(p.stem))
    if not files:
        raise FileNotFoundError(f"{run_dir}/rollouts holds no <iteration>.jsonl (run the sweep with rollouts)")
    per_iteration = {int(p.stem): iteration_figures(read_iteration(p), levels) for p in files}
    first_win = next((i for i, f in sorted(per_iteration.items()) if f["minus_wins"] > 0), None)
    return {"per_iteration": per_iteration, "first_minus_win": first_win, "validation": validation_run(run_dir)}


def one_line(text: str) -> str:
    return " ".join(text.split())


def same_state(quoted: str, observation: str) -> bool:
    """Whether a lesson's quoted state is ``observation`` (whitespace aside; a quote cut with "..." matches the
    observations it starts)."""
    quoted, observation = one_line(quoted), one_line(observation)
    return quoted == observation or (quoted.endswith("...") and observation.startswith(quoted[:-3].rstrip()))


def named_actions(entry: dict, observation: str) -> list[str]:
    """The actions a shown entry (a dump line's ``experiences`` element) tells the agent to take at
    ``observation``: its advice's ``do`` where the dump holds advice, else the tagged actions after ``At
    "<observation>", answer with`` in its text; empty when it names none for this state."""
    advice = entry.get("advice")
    if advice is not None:
        return list(advice["do"]) if same_state(advice["state"], observation) else []
    for match in LESSON_AT_STATE.finditer(entry.get("text") or ""):
        if same_state(match.group("state"), observation):
            return TAGGED.findall(match.group("actions"))
    return []


def validation_counts(lines: list[dict]) -> dict[str, dict]:
    """Per held-out state (anchor observation) of one validation pass: counts that add up over seeds."""
    states: dict[str, dict] = {}
    for line in lines:
        state = states.setdefault(line["observation"], {
            "steps": 0, "won_steps": 0, "shown_steps": 0, "told_steps": 0, "followed_steps": 0,
            "answered": defaultdict(int), "levels": defaultdict(int), "named": defaultdict(int)})
        entries = line.get("experiences", [])
        named = [action for entry in entries for action in named_actions(entry, line["observation"])]
        answer = line["action"] if line["valid"] else INVALID
        state["steps"] += 1
        state["won_steps"] += int(line["success"])
        state["shown_steps"] += int(bool(entries))
        state["told_steps"] += int(bool(named))
        state["followed_steps"] += int(answer in named)
        state["answered"][answer] += 1
        for entry in entries:
            state["levels"][entry["level"] or "unknown"] += 1
        for action in named:
            state["named"][action] += 1
    return states


def add_counts(total: dict, counts: dict) -> None:
    for key, value in counts.items():
        if isinstance(value, dict):
            bucket = total.setdefault(key, defaultdict(int))
            for name, n in value.items():
                bucket[name] += n
        else:
            total[key] = total.get(key, 0) + value


def state_figures(counts: dict) -> dict:
    """Counts of one state and pass -> the summary figures (shares from the summed counts)."""
    steps, told = counts["steps"], counts["told_steps"]
    return {"steps": steps, "success": counts["won_steps"] / steps,
            "answered": dict(sorted(counts["answered"].items())), "shown_steps": counts["shown_steps"],
            "levels": dict(sorted(counts["levels"].items())), "named": dict(sorted(counts["named"].items())),
            "told_steps": told, "followed": counts["followed_steps"] / told if told else None}


def validation_run(run_dir: Path) -> dict[int, dict[str, dict[str, dict]]]:
    """Iteration -> state -> pass -> counts, from a run's validation dumps (empty when it has none)."""
    out: dict[int, dict[str, dict[str, dict]]] = defaultdict(dict)
    for name in VAL_PASSES:
        for path in (run_dir / "rollouts" / name).glob("*.jsonl"):
            for state, counts in validation_counts(read_iteration(path)).items():
                out[int(path.stem)].setdefault(state, {})[name] = counts
    return dict(out)


def validation_summary(runs: list[dict[int, dict]]) -> dict:
    """Iteration -> state -> {"needs_minus", pass -> figures} over the seeds' runs (counts summed)."""
    totals: dict[int, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for run in runs:
        for iteration, states in run.items():
            for state, passes in states.items():
                for name, counts in passes.items():
                    add_counts(totals[iteration][state].setdefault(name, {}), counts)
    return {it: {state: {"needs_minus": needs_minus(state),
                         **{name: state_figures(passes[name]) for name in VAL_PASSES if name in passes}}
                 for state, passes in sorted(states.items())}
            for it, states in sorted(totals.items())}


def analyze(runs_dir: Path, library_runs: set[str]) -> dict:
    runs: dict[str, dict[str, dict]] = defaultdict(dict)
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        match = RUN_NAME.match(run_dir.name)
        if match is None or not (run_dir / "rollouts").is_dir():
            continue
        estimator = match.group("estimator")
        runs[estimator][match.group("seed")] = analyze_run(run_dir, estimator in library_runs)
    summary = {}
    for estimator, seeds in runs.items():
        iterations = sorted(set().union(*(r["per_iteration"] for r in seeds.values())))
        keys = sorted(set().union(*(f.keys() for r in seeds.values() for f in r["per_iteration"].values())))
        table = {}
        for it in iterations:
            table[it] = {}
            for key in keys:
                values = [r["per_iteration"][it][key] for r in seeds.values()
                          if it in r["per_iteration"] and key in r["per_iteration"][it]]
                values = [v for v in values if v == v]  # nan: no state needed "-" in that batch
                if values:
                    table[it][key] = sum(values) if key == "minus_wins" else statistics.fmean(values)
        summary[estimator] = {"per_iteration_mean": table,
                              "first_minus_win": {seed: r["first_minus_win"] for seed, r in seeds.items()}}
        validation = validation_summary([r["validation"] for r in seeds.values()])
        if validation:
            summary[estimator]["validation"] = validation
    return summary


def _counts_text(counts: dict[str, int] | None) -> str:
    """``name:n`` pairs; ``-`` for none, empty for a pass that never reached the state."""
    if counts is None:
        return ""
    return " ".join(f"{name}:{n}" for name, n in counts.items()) or "-"


def _share_text(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


# (header, width, align) of the validation table's columns after the state
VALIDATION_COLUMNS = (("steps", 5, ">"), ("success", 7, ">"), ("steps w/o", 9, ">"), ("success w/o", 11, ">"),
                      ("levels shown", 24, "<"), ("named", 8, "<"), ("followed", 8, ">"), ("answered", 16, "<"),
                      ("answered w/o", 0, "<"))


def render_validation(estimator: str, validation: dict) -> list[str]:
    """One table per validation iteration: a row per held-out state, with the library and without it (w/o)."""
    out = []
    for iteration, states in validation.items():
        out.append(f"{estimator}: validation at iteration {iteration}, per held-out state (w/o: without the library)")
        out.append(f"  {'state':<22} | " + " | ".join(f"{h:{a}{w}}" for h, w, a in VALIDATION_COLUMNS))
        for state, row in states.items():
            lib, plain = row.get("val"), row.get("val_no_library")
            cells = [str(lib["steps"]) if lib else "", _share_text(lib and lib["success"]),
                     str(plain["steps"]) if plain else "", _share_text(plain and plain["success"]),
                     _counts_text(lib and lib["levels"]), _counts_text(lib and lib["named"]),
                     _share_text(lib and lib["followed"]), _counts_text(lib and lib["answered"]),
                     _counts_text(plain and plain["answered"])]
            text = " | ".join(f"{cell:{a}{w}}" for cell, (_, w, a) in zip(cells, VALIDATION_COLUMNS))
            out.append(f"  {one_line(state):<22} | {text}".rstrip())
    return out


def render(summary: dict) -> str:
    out = []
    for estimator, data in summary.items():
        out.append(f"{estimator}: first iteration with a '-' win per seed: {data['first_minus_win']}")
        rows = data["per_iteration_mean"]
        keys = [k for k in ("minus_tried", "minus_wins", "shown_any", "shown_minus", "shown_plus")
                if any(k in r for r in rows.values())]
        out.append("  iteration | " + " | ".join(f"{k:>11}" for k in keys))
        for it, row in rows.items():
            out.append(f"  {it:>9} | " + " | ".join(f"{row.get(k, float('nan')):>11.3f}" for k in keys))
        out += render_validation(estimator, data.get("validation", {}))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/seed_sweep"))
    parser.add_argument("--library-runs", nargs="+", default=["forge"], help="estimators whose runs have a library")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    summary = analyze(args.runs_dir, set(args.library_runs))
    print(render(summary))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

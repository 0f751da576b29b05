"""``slea-rl-trajectories``: the steps a run dumped (``trainer.rollout_data_dir``, recipe/forge/engines/local/
rollout_dump.py) as one static HTML page and one Markdown file, one row per step: the observation, the
experiences shown (text, zone, level, entry id), the response, the parsed action, validity, reward and
advantage (a column only where the dump has one), with filters by task, outcome, pass and iteration; an
episode's task is shown on its first row.

    slea-rl-trajectories runs/slea_rl/forge_numberline/rollouts --out trajectories
    slea-rl-trajectories rollouts --out trajectories --library runs/.../global_step_16/library
    slea-rl-trajectories runs/slea_rl/forge_numberline/eval/global_step_16/trajectories --out eval_page  # slea-rl eval's

With ``--library`` the checkpoint's library is written next to the page (``library.html``, the library
viewer's HTML export) and every entry id links to its row there. The page is self-contained (inline style and
a small inline script for the filters, nothing fetched); the URL's fragment presets the filters
(``trajectories.html#outcome=failure&iteration=3``). Every model-, user- or environment-written string is
escaped: as HTML on the page, through recipe/forge/safe_text.py in the Markdown. A missing or empty folder is
one error line (exit status 2); a torn or foreign line is skipped with a warning naming its file and line.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.experience.store import CheckpointError, load_payload
from recipe.forge.experience.viewer import as_html as library_html
from recipe.forge.experience.viewer import entry_anchor, organise
from recipe.forge.safe_text import markdown_text, terminal_text

# the dump's folders: the top level (training), val/ and val_no_library/ (validation, and slea-rl eval's passes with
# and without the checkpoint's library), val_other_library/ (slea-rl eval --library-from)
PASSES = ("train", "val", "val_no_library", "val_other_library")
LIBRARY_PAGE = "library.html"
WARNINGS_PER_FILE = 3  # skipped lines named per file (a foreign file, such as verl's training dump, is one note)
FIELD_TYPES = {"task": str, "traj_uid": str, "turn": int, "observation": str, "output": str, "valid": bool,
               "score": (int, float), "success": bool, "experiences": list}


class DumpError(ValueError):
    """The dump folder cannot be read at all (missing, not a folder, no dump file)."""


def _dump_files(directory: Path) -> list[tuple[str, int, Path]]:
    """(pass, iteration, path) of every dump file, in pass then iteration order."""
    if not directory.is_dir():
        raise DumpError(f"{directory}: not a folder (give the run's trainer.rollout_data_dir)")
    found = []
    for pass_name in PASSES:
        folder = directory if pass_name == "train" else directory / pass_name
        for path in folder.glob("*.jsonl"):
            if path.stem.isdigit():
                found.append((pass_name, int(path.stem), path))
    if not found:
        raise DumpError(f"{directory}: no dump file (<k>.jsonl, val/<k>.jsonl, val_no_library/<k>.jsonl)")
    return sorted(found, key=lambda item: (PASSES.index(item[0]), item[1]))


def _experience(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise ValueError("an experience is not an object with a string id")
    return {key: entry.get(key) for key in ("id", "zone", "level", "text")}


def parse_line(text: str, pass_name: str, iteration: int) -> dict[str, Any]:
    """One dump line as a row; ValueError naming what is wrong with a torn or foreign line."""
    line = read_json(text, "the line")  # a ValueError naming the fault (torn, nested too deeply, huge integers)
    if not isinstance(line, dict):
        raise ValueError("not a JSON object")
    for key, kind in FIELD_TYPES.items():
        value = line.get(key)
        if not isinstance(value, kind) or (kind in (int, (int, float)) and isinstance(value, bool)):
            raise ValueError(f"field {key!r} missing or not {getattr(kind, '__name__', 'a number')}")
    advantage = line.get("advantage")
    return {"pass": pass_name, "iteration": iteration, "task": line["task"], "traj_uid": line["traj_uid"],
            "turn": line["turn"], "observation": line["observation"],
            "experiences": [_experience(e) for e in line["experiences"]], "output": line["output"],
            "action": str(line.get("action") or ""), "valid": line["valid"], "score": float(line["score"]),
            "advantage": float(advantage) if isinstance(advantage, (int, float)) else None,
            "success": line["success"]}


def read_dump(directory: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(every step of every pass and iteration as a row, a warning per skipped line)."""
    rows, warnings = [], []
    for pass_name, iteration, path in _dump_files(Path(directory)):
        skipped = []
        for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not text.strip():
                continue
            try:
                rows.append(parse_line(text, pass_name, iteration))
            except ValueError as exc:
                skipped.append(f"{path}:{number}: skipped: {exc}")
        warnings += skipped[:WARNINGS_PER_FILE]
        if len(skipped) > WARNINGS_PER_FILE:
            warnings.append(f"{path}: {len(skipped) - WARNINGS_PER_FILE} more lines skipped")
    return rows, warnings


def _outcome(row: dict[str, Any]) -> str:
    return "success" if row["success"] else "failure"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


STYLE = """body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;width:100%}
td,th{border:1px solid #999;padding:4px;vertical-align:top;text-align:left}th{background:#eee}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:90%}tr.failure td.outcome{color:#a00}
tr.success td.outcome{color:#070}.zone-warning{color:#a00}.zone-golden{color:#960}label{margin-right:1em}"""

SCRIPT = """function applyFilters(){
  var want={};document.querySelectorAll('select[data-filter]').forEach(function(s){want[s.dataset.filter]=s.value;});
  var shown=0;document.querySelectorAll('tr.step').forEach(function(r){
    var ok=Object.keys(want).every(function(k){return want[k]===''||r.dataset[k]===want[k];});
    r.hidden=!ok;if(ok){shown++;}});
  document.getElementById('shown').textContent=String(shown);}
function filtersFromHash(){
  new URLSearchParams(location.hash.slice(1)).forEach(function(value,key){
    var s=document.querySelector('select[data-filter="'+CSS.escape(key)+'"]');if(s){s.value=value;}});}
document.querySelectorAll('select[data-filter]').forEach(function(s){s.addEventListener('change',applyFilters);});
filtersFromHash();applyFilters();"""


def _select(name: str, label: str, values: list[str]) -> str:
    esc = html.escape
    options = "".join(f"<option value='{esc(v)}'>{esc(v)}</option>" for v in values)
    return (f"<label>{esc(label)} <select data-filter='{name}'><option value=''>all</option>{options}"
            "</select></label>")


def _experiences_html(experiences: list[dict[str, Any]], linked: set[str]) -> str:
    esc = html.escape
    items = []
    for e in experiences:
        ident = esc(e["id"])
        if e["id"] in linked:
            ident = f"<a href='{LIBRARY_PAGE}#{entry_anchor(e['id'])}'>{ident}</a>"
        zone, level = esc(str(e["zone"] or "?")), esc(str(e["level"] or "?"))
        text = esc(e["text"]) if isinstance(e["text"], str) else "<i>no longer in the library</i>"
        items.append(f"<li class='zone-{zone}'>[{ident}] {zone}/{level}: <pre>{text}</pre></li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def has_advantage(rows: list[dict[str, Any]]) -> bool:
    """Whether any step has an advantage (the rollout dumps record none; a dump that does gets the column)."""
    return any(r["advantage"] is not None for r in rows)


def episode_starts(rows: list[dict[str, Any]]) -> list[bool]:
    """For each row, whether it is the first of its episode's rows (its task is shown there only)."""
    keys = [(r["pass"], r["iteration"], r["traj_uid"]) for r in rows]
    return [n == 0 or key != keys[n - 1] for n, key in enumerate(keys)]


def as_html(rows: list[dict[str, Any]], library_ids: set[str] | None = None) -> str:
    """The page: the filters, then one table row per step (``data-task``, ``data-outcome``, ``data-pass`` and
    ``data-iteration`` hold what the filters compare); the entry ids in ``library_ids`` (the entries on
    ``library.html``) link to their rows there."""
    linked = library_ids or set()
    esc = html.escape
    tasks = sorted({r["task"] for r in rows})
    iterations = [str(i) for i in sorted({r["iteration"] for r in rows})]
    passes = [p for p in PASSES if any(r["pass"] == p for r in rows)]
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>Trajectories</title>",
             f"<style>{STYLE}</style></head><body><h1>Trajectories</h1><p>",
             _select("task", "task", tasks), _select("outcome", "outcome", ["success", "failure"]),
             _select("pass", "pass", passes), _select("iteration", "iteration", iterations),
             f"</p><p><span id='shown'>{len(rows)}</span> of {len(rows)} steps shown.</p>",
             "<table><tr><th>pass</th><th>iteration</th><th>task</th><th>episode</th><th>turn</th>"
             "<th>observation</th><th>experiences shown</th><th>response</th><th>action</th><th>valid</th>"
             f"<th>reward</th>{'<th>advantage</th>' if has_advantage(rows) else ''}<th>outcome</th></tr>"]
    advantage = has_advantage(rows)
    for r, first in zip(rows, episode_starts(rows)):
        advantage_cell = f"<td>{_number(r['advantage'])}</td>" if advantage else ""
        parts.append(
            f"<tr class='step {_outcome(r)}' data-task='{esc(r['task'])}' data-outcome='{_outcome(r)}' "
            f"data-pass='{r['pass']}' data-iteration='{r['iteration']}'><td>{r['pass']}</td>"
            f"<td>{r['iteration']}</td><td>{esc(r['task']) if first else ''}</td><td>{esc(r['traj_uid'])}</td>"
            f"<td>{r['turn']}</td><td><pre>{esc(r['observation'])}</pre></td>"
            f"<td>{_experiences_html(r['experiences'], linked)}</td><td><pre>{esc(r['output'])}</pre></td>"
            f"<td><pre>{esc(r['action'])}</pre></td><td>{'yes' if r['valid'] else 'no'}</td>"
            f"<td>{_number(r['score'])}</td>{advantage_cell}<td class='outcome'>{_outcome(r)}</td></tr>")
    parts.append(f"</table><script>{SCRIPT}</script></body></html>")
    return "".join(parts)


def _cell(text: str) -> str:
    """One inert Markdown table cell of a multi-line text (line breaks shown as ``↵``)."""
    return markdown_text(text.replace("\r\n", "\n").replace("\n", " ↵ "))


def as_markdown(rows: list[dict[str, Any]]) -> str:
    """A section per pass and iteration, one table row per step; every text through ``markdown_text``."""
    out = ["# Trajectories", ""]
    advantage = has_advantage(rows)
    header = [f"| episode | turn | observation | experiences shown | response | action | valid | reward | "
              f"{'advantage | ' if advantage else ''}outcome |",
              f"|---|---:|---|---|---|---|---|---:|{'---:|' if advantage else ''}---|"]
    section = None
    for r, first in zip(rows, episode_starts(rows)):
        if (r["pass"], r["iteration"]) != section:
            section = (r["pass"], r["iteration"])
            out += ["", f"## {r['pass']}, iteration {r['iteration']}", "", *header]
        shown = "; ".join(f"[{e['id']}] {e['zone'] or '?'}/{e['level'] or '?'}: {e['text'] or '(no longer held)'}"
                          for e in r["experiences"])
        episode = f"{_cell(r['traj_uid'])} ({_cell(r['task'])})" if first else _cell(r["traj_uid"])
        out.append(f"| {episode} | {r['turn']} | {_cell(r['observation'])} | "
                   f"{_cell(shown)} | {_cell(r['output'])} | {_cell(r['action'])} | {'yes' if r['valid'] else 'no'} | "
                   f"{_number(r['score'])} | {_number(r['advantage']) + ' | ' if advantage else ''}{_outcome(r)} |")
    return "\n".join(out) + "\n"


def library_ids(view: dict[str, Any] | None) -> set[str]:
    """The entry ids on the library page of ``view`` (the library viewer's ``organise``), none without one."""
    if view is None:
        return set()
    return {str(e["entry_id"]) for levels in view["zones"].values() for rows in levels.values() for e in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slea-rl-trajectories", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("rollout_data_dir", type=Path, help="the run's trainer.rollout_data_dir")
    parser.add_argument("--out", type=Path, required=True, help="folder for trajectories.html / .md")
    parser.add_argument("--library", help="checkpoint folder or experience_library.json: written as "
                                          "library.html next to the page, entry ids link to it")
    args = parser.parse_args(argv)
    try:
        rows, warnings = read_dump(args.rollout_data_dir)
        library = None if args.library is None else organise(load_payload(args.library))
        args.out.mkdir(parents=True, exist_ok=True)
        for suffix, text in (("html", as_html(rows, library_ids(library))), ("md", as_markdown(rows))):
            (args.out / f"trajectories.{suffix}").write_text(text, encoding="utf-8", errors="replace")
        if library is not None:
            (args.out / LIBRARY_PAGE).write_text(library_html(library), encoding="utf-8", errors="replace")
    except (DumpError, CheckpointError, OSError) as exc:
        print(f"error: {terminal_text(exc)}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"warning: {terminal_text(warning)}", file=sys.stderr)
    print(f"{len(rows)} steps -> {terminal_text(args.out / 'trajectories.html')} and trajectories.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

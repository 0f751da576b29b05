"""``slea-rl-library diff A B``: what changed in the experience library between two checkpoints of one run.

    slea-rl-library diff runs/x/global_step_10 runs/x/global_step_20            # console
    slea-rl-library diff A B --json                                             # the diff as JSON on stdout
    slea-rl-library diff A B --export-md diff.md --quiet                        # Markdown

A and B are library folders (holding experience_library.json), the file itself, or checkpoint folders holding
one as ``library/`` (embedded engine) or ``forge_library/`` (verl engine). Entries are matched by id (ids are
never reused within a run). Per zone and level the diff lists:

* **added**: in B, not in A;
* **pruned**: in A, not in B (pruned, or replaced at admission by a better candidate);
* **merged**: in both, with more support in B: the library merges a novel-enough candidate into its most
  similar entry by adding the candidate's support (library.py), and nothing else changes support, so the
  support gained is the number of trajectories merged in (``support_gained``);
* **re-scored**: in both, with another score (``old -> new``; a merge keeps the higher score).

Each entry shows its retrieval count in B and how much it grew since A (``retrieval_count``: the steps it was
injected into), and its episode outcomes in B (in A for a pruned entry; recipe/forge/experience/outcomes.py):
``shown: s/n (rate)`` of the training episodes shown it, ``same clusters, not shown: s/n (rate)`` of those at its
clusters not shown it, and the difference in percentage points, ``-`` where a group has no episodes (``outcomes``
in the JSON: successes, episodes and rate of each group, and the difference). Ids created after A and gone again
by B are counted (``added_then_dropped``): their zone and level are not saved anywhere. An id present in both
with another zone, level or text means the two files are not checkpoints of one run: that, and a missing or
damaged file, is one error line and exit status 2.
Every lesson text is shown inert (recipe/forge/safe_text.py) in the console and the Markdown; ``--json``
writes ASCII JSON (every control character escaped).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from recipe.forge.experience.library import LEVELS
from recipe.forge.experience.outcomes import OUTCOME_COLUMNS, outcome_cells, outcome_summary, outcome_text
from recipe.forge.experience.store import FILENAME, CheckpointError, load_payload
from recipe.forge.safe_text import markdown_text, terminal_text

LIBRARY_SUBFOLDERS = ("library", "forge_library")  # embedded engine, verl engine
KINDS = ("added", "pruned", "merged", "rescored")
LABELS = {"added": "added", "pruned": "pruned", "merged": "merged", "rescored": "re-scored"}


def library_path(path: str | Path) -> Path:
    """The library file or folder that ``path`` names: itself, or its ``library/`` or ``forge_library/``."""
    path = Path(path)
    if path.is_dir() and not (path / FILENAME).exists():
        for sub in LIBRARY_SUBFOLDERS:
            if (path / sub / FILENAME).exists():
                return path / sub
    return path


def _row(entry: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    """One listed entry: its fields in B (in A for a pruned one), its outcomes (outcomes.outcome_summary) and, with
    ``before`` (its A version), what changed."""
    row = {"entry_id": entry["entry_id"], "text": entry["text"], "score": entry["score"],
           "support": entry["support"], "retrieval_count": entry["retrieval_count"],
           "created_iter": entry["created_iter"], "updated_iter": entry["updated_iter"],
           "outcomes": outcome_summary(entry)}
    if before is not None:
        row.update(old_score=before["score"], support_gained=entry["support"] - before["support"],
                   retrievals_gained=entry["retrieval_count"] - before["retrieval_count"])
    return row


def diff_payloads(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The diff (module docstring) of two validated checkpoint payloads; raises CheckpointError when an id
    names different entries in the two."""
    old = {e["entry_id"]: e for e in a["library"]["entries"]}
    new = {e["entry_id"]: e for e in b["library"]["entries"]}
    for eid in sorted(old.keys() & new.keys()):
        if any(old[eid][f] != new[eid][f] for f in ("zone", "level", "text")):
            raise CheckpointError(f"entry #{eid} has another zone, level or text in B than in A: the two libraries "
                                  "are not checkpoints of one run")
    zones: dict[str, dict[str, dict[str, list]]] = {}
    counts = dict.fromkeys(KINDS, 0)
    for zone, levels in LEVELS.items():
        zones[zone] = {}
        for level in levels:
            here = {k: [] for k in KINDS}
            for eid, e in sorted(new.items()):
                if (e["zone"], e["level"]) != (zone, level):
                    continue
                if eid not in old:
                    here["added"].append(_row(e))
                    continue
                if e["support"] > old[eid]["support"]:
                    here["merged"].append(_row(e, old[eid]))
                if e["score"] != old[eid]["score"]:
                    here["rescored"].append(_row(e, old[eid]))
            here["pruned"] = [_row(e) for eid, e in sorted(old.items())
                              if eid not in new and (e["zone"], e["level"]) == (zone, level)]
            for kind in KINDS:
                counts[kind] += len(here[kind])
            zones[zone][level] = here
    start, end = a["library"]["next_id"], b["library"]["next_id"]
    return {
        "a": {"iteration": a["iteration"], "version": a["version"], "entries": len(old)},
        "b": {"iteration": b["iteration"], "version": b["version"], "entries": len(new)},
        "counts": counts,
        # ids given out between the two files, less those still held: counted, never enumerated (next_id is the
        # file's word, and a crafted one can be any size)
        "added_then_dropped": max(0, end - start) - sum(1 for eid in new if start <= eid < end),
        "zones": zones,
    }


def _header(diff: dict[str, Any]) -> str:
    a, b, c = diff["a"], diff["b"], diff["counts"]
    return (f"library diff: A iteration {a['iteration']} (version {a['version']}, {a['entries']} entries) -> "
            f"B iteration {b['iteration']} (version {b['version']}, {b['entries']} entries): "
            + ", ".join(f"{LABELS[k]} {c[k]}" for k in KINDS) + f", added then dropped {diff['added_then_dropped']}")


def _change(kind: str, r: dict[str, Any]) -> str:
    """What changed for one row of ``kind``, as plain text (numbers only)."""
    if kind == "merged":
        return f"support {r['support'] - r['support_gained']} -> {r['support']} (+{r['support_gained']})"
    if kind == "rescored":
        return f"score {r['old_score']:.4g} -> {r['score']:.4g}"
    return f"score {r['score']:.4g}, support {r['support']}"


def _retrieved(r: dict[str, Any]) -> str:
    gained = f" (+{r['retrievals_gained']})" if "retrievals_gained" in r else ""
    return f"retrieved {r['retrieval_count']}{gained}"


def as_text(diff: dict[str, Any]) -> str:
    lines = [_header(diff)]
    for zone, levels in diff["zones"].items():
        for level, kinds in levels.items():
            found = {k: len(v) for k, v in kinds.items()}
            lines.append(f"\n== {zone} / {level}: " + ", ".join(f"{LABELS[k]} {n}" for k, n in found.items()) + " ==")
            for kind, rows in kinds.items():
                for r in rows:
                    lines.append(f"  {LABELS[kind]:<9} #{r['entry_id']:<5} {_change(kind, r)}; {_retrieved(r)}; "
                                 f"{outcome_text(r['outcomes'])}; it={r['created_iter']}-{r['updated_iter']}  "
                                 f"{terminal_text(r['text'])}")
    return "\n".join(lines)


def as_markdown(diff: dict[str, Any]) -> str:
    out = ["# Experience library diff", "", markdown_text(_header(diff)), ""]
    for zone, levels in diff["zones"].items():
        out.append(f"## {zone.capitalize()} zone")
        for level, kinds in levels.items():
            out += [f"### {level} (" + ", ".join(f"{LABELS[k]} {len(v)}" for k, v in kinds.items()) + ")", ""]
            rows = [(kind, r) for kind, found in kinds.items() for r in found]
            if rows:
                out += [f"| change | id | what | retrieved | {' | '.join(OUTCOME_COLUMNS)} | text |",
                        "|---|---:|---|---|---:|---:|---:|---|"]
                out += [f"| {LABELS[kind]} | {r['entry_id']} | {_change(kind, r)} | {_retrieved(r)} | "
                        f"{' | '.join(outcome_cells(r['outcomes']))} | {markdown_text(r['text'])} |"
                        for kind, r in rows]
                out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slea-rl-library diff", description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the earlier checkpoint: a library folder, its file, or a checkpoint folder")
    parser.add_argument("b", help="the later checkpoint")
    parser.add_argument("--json", action="store_true", help="print the diff as JSON instead of text")
    parser.add_argument("--export-md", type=Path, help="write the diff as Markdown to this file")
    parser.add_argument("--quiet", action="store_true", help="print nothing (with --export-md)")
    args = parser.parse_args(argv)
    try:
        diff = diff_payloads(load_payload(library_path(args.a)), load_payload(library_path(args.b)))
    except CheckpointError as exc:
        print(f"error: {terminal_text(exc)}", file=sys.stderr)
        return 2
    if args.export_md:
        try:
            args.export_md.write_text(as_markdown(diff), encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot write {terminal_text(args.export_md)}: {terminal_text(exc.strerror)}",
                  file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(diff, indent=2, ensure_ascii=True))
    elif not args.quiet:
        print(as_text(diff))
    return 0

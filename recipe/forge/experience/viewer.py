"""The library's views: a checkpoint's library organised (zones -> levels -> entries, cluster statistics, each
entry's verdict against the environment's expert and its outcomes) and rendered as text, Markdown or HTML.
``slea-rl-library`` (recipe/forge/commands/library_viewer.py) prints and exports them, ``slea-rl export`` writes
the Markdown, ``slea-rl-trajectories`` links the HTML.

Lesson texts and prototypes quote model output: the console view and the Markdown show them through
recipe/forge/safe_text.py (no terminal escape, no live markup), the HTML escapes them as HTML.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

import numpy as np

from recipe.forge.experience.lesson_quality import RIGHT, WRONG, verdict
from recipe.forge.experience.library import LEVELS, Advice
from recipe.forge.experience.outcomes import (OUTCOME_COLUMNS, OUTCOME_FIELDS, outcome_cells, outcome_summary,
                                              outcome_text)
from recipe.forge.safe_text import markdown_text, terminal_text

NOT_CHECKABLE = "not checkable"
VERDICTS = (RIGHT, WRONG, NOT_CHECKABLE)


def entry_verdict(entry: dict[str, Any]) -> str:
    """``right``, ``wrong`` or ``not checkable``: a saved entry's advice against the expert (lesson_quality.verdict);
    entries saved before lessons carried advice are not checkable."""
    advice = entry.get("advice")
    return verdict(None if advice is None else Advice.from_dict(advice)) or NOT_CHECKABLE


def organise(payload: dict[str, Any], zone: str | None = None, top: int | None = None) -> dict[str, Any]:
    """The checkpoint as zones -> levels -> entries (best first: score, support, recency; each with its
    ``verdict`` and its ``outcomes``, outcomes.outcome_summary; outcome counters a library saved before them lacks
    are 0), the verdict counts of every level (all its entries, also beyond ``top``) and cluster stats."""
    entries = [{**dict.fromkeys(OUTCOME_FIELDS, 0), **e, "verdict": entry_verdict(e), "outcomes": outcome_summary(e)}
               for e in payload["library"]["entries"]]
    zones: dict[str, dict[str, list[dict]]] = {}
    verdicts: dict[str, dict[str, dict[str, int]]] = {}
    for z, levels in LEVELS.items():
        if zone is not None and z != zone:
            continue
        zones[z], verdicts[z] = {}, {}
        for level in levels:
            rows = [e for e in entries if e["zone"] == z and e["level"] == level]
            rows.sort(key=lambda e: (-e["score"], -e["support"], -e["updated_iter"], e["entry_id"]))
            found = Counter(e["verdict"] for e in rows)
            verdicts[z][level] = {v: found[v] for v in VERDICTS}
            zones[z][level] = rows[:top] if top is not None else rows
    return {
        "iteration": payload["iteration"],
        "version": payload["version"],
        "capacity": {"golden": payload["library"]["golden_capacity"],
                     "warning": payload["library"]["warning_capacity"]},
        "sizes": {z: sum(1 for e in entries if e["zone"] == z) for z in LEVELS},
        "zones": zones,
        "verdicts": verdicts,
        "clusters": cluster_stats(payload),
    }


def cluster_stats(payload: dict[str, Any], top: int = 10) -> dict[str, Any]:
    clusters = payload["index"]["clusters"]
    uses = np.array([c["uses"] for c in clusters], dtype=np.int64)
    links = Counter(cid for e in payload["library"]["entries"] for cid in e["cluster_ids"])
    busiest = sorted(clusters, key=lambda c: (-c["uses"], c["cluster_id"]))[:top]
    return {
        "count": int(uses.size),
        "evicted": payload["index"]["evicted"],
        "exact_mode": payload["index"]["exact"],
        "threshold": payload["index"]["threshold"],
        "uses_mean": float(uses.mean()) if uses.size else 0.0,
        "uses_max": int(uses.max()) if uses.size else 0,
        "singleton_share": float((uses == 1).mean()) if uses.size else 0.0,
        "with_experiences": sum(1 for c in clusters if links.get(c["cluster_id"])),
        "busiest": [{"cluster_id": c["cluster_id"], "uses": c["uses"], "linked_entries": links.get(c["cluster_id"], 0),
                     "prototype": c["prototype"]} for c in busiest],
    }


def _short(text: str, limit: int = 100) -> str:
    flat = terminal_text(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def verdict_counts(counts: dict[str, int]) -> str:
    """``right 2, wrong 1, not checkable 3``."""
    return ", ".join(f"{v} {counts[v]}" for v in VERDICTS)


def status_note(entry: dict[str, Any]) -> str:
    """``; not shown (harm)`` for a retired entry (retirement.py), else nothing."""
    return f"; not shown ({entry['retired']})" if entry.get("retired") else ""


def as_text(view: dict[str, Any]) -> str:
    lines = [f"experience library: iteration {view['iteration']}, version {view['version']}, "
             f"golden {view['sizes']['golden']}/{3 * view['capacity']['golden']}, "
             f"warning {view['sizes']['warning']}/{3 * view['capacity']['warning']}"]
    for zone, levels in view["zones"].items():
        lines.append(f"\n== {zone} ==")
        for level, rows in levels.items():
            lines.append(f"  -- {level} ({len(rows)} shown; {verdict_counts(view['verdicts'][zone][level])}) --")
            for e in rows:
                lines.append(f"    #{e['entry_id']:<5} score={e['score']:<7.3g} support={e['support']:<3} "
                             f"retrieved={e['retrieval_count']:<4} clusters={len(e['cluster_ids']):<3} "
                             f"it={e['created_iter']}-{e['updated_iter']}  {e['verdict']:<13}  {terminal_text(e['text'])}")
                lines.append(f"           {outcome_text(e['outcomes'])}{status_note(e)}")
    c = view["clusters"]
    lines.append(f"\n== clusters ==\n  count {c['count']} (evicted {c['evicted']}, exact mode {c['exact_mode']}, "
                 f"threshold {c['threshold']}), uses mean {c['uses_mean']:.2f} max {c['uses_max']}, "
                 f"singletons {c['singleton_share']:.1%}, with experiences {c['with_experiences']}")
    for b in c["busiest"]:
        lines.append(f"    c{b['cluster_id']:<6} uses={b['uses']:<5} entries={b['linked_entries']:<3} "
                     f"{_short(b['prototype'])}")
    return "\n".join(lines)


def as_markdown(view: dict[str, Any]) -> str:
    out = [f"# Experience library (iteration {view['iteration']}, version {view['version']})", ""]
    for zone, levels in view["zones"].items():
        out.append(f"## {zone.capitalize()} zone")
        for level, rows in levels.items():
            out += [f"### {level} ({len(rows)}; {verdict_counts(view['verdicts'][zone][level])})", "",
                    f"| id | score | support | retrieved | {' | '.join(OUTCOME_COLUMNS)} | verdict | text |",
                    "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
            out += [f"| {e['entry_id']} | {e['score']:.3g} | {e['support']} | {e['retrieval_count']} | "
                    f"{' | '.join(outcome_cells(e['outcomes']))} | {e['verdict']}{status_note(e)} | {markdown_text(e['text'])} |"
                    for e in rows]
            out.append("")
    c = view["clusters"]
    out += ["## Clusters", "", f"{c['count']} clusters, {c['evicted']} evicted, mean uses {c['uses_mean']:.2f}, "
            f"singleton share {c['singleton_share']:.1%}, {c['with_experiences']} with experiences.", ""]
    if c["busiest"]:
        out += [f"The {len(c['busiest'])} most used:", "", "| cluster | uses | linked entries | observation |",
                "|---:|---:|---:|---|"]
        out += [f"| {markdown_text(str(b['cluster_id']))} | {markdown_text(str(b['uses']))} | {b['linked_entries']} | "
                f"{markdown_text(_short(str(b['prototype'])))} |"
                for b in c["busiest"]]
        out.append("")
    return "\n".join(out)


def entry_anchor(entry_id: object) -> str:
    """The HTML id of an entry's row in :func:`as_html`'s page (``library.html#entry-12``): other pages link
    to an entry by it."""
    return f"entry-{int(entry_id)}"


STYLE = """body{font-family:sans-serif;margin:1em;max-width:100em}table{border-collapse:collapse;margin-bottom:1em}
td,th{border:1px solid #999;padding:4px 6px;vertical-align:top;text-align:left}th{background:#eee}
td.number{text-align:right;white-space:nowrap}td.text{white-space:pre-wrap;word-break:break-word}
h2.zone-golden{color:#960}h2.zone-warning{color:#a00}tr:target{background:#ffd}"""


def as_html(view: dict[str, Any]) -> str:
    """The library as one self-contained page (inline style, nothing fetched), every text HTML-escaped."""
    esc = html.escape
    parts = [f"<html><head><meta charset='utf-8'><title>Experience library</title><style>{STYLE}</style></head>"
             f"<body><h1>Experience library (iteration {view['iteration']}, version {view['version']})</h1>"]
    for zone, levels in view["zones"].items():
        parts.append(f"<h2 class='zone-{esc(zone)}'>{esc(zone)} zone</h2>")
        for level, rows in levels.items():
            counts = esc(verdict_counts(view["verdicts"][zone][level]))
            outcome_heads = "".join(f"<th>{esc(name)}</th>" for name in OUTCOME_COLUMNS)
            parts.append(f"<h3>{esc(level)} ({len(rows)}; {counts})</h3><table><tr><th>id</th>"
                         f"<th>score</th><th>support</th><th>retrieved</th>{outcome_heads}<th>verdict</th>"
                         "<th>text</th></tr>")
            parts += [f"<tr id='{entry_anchor(e['entry_id'])}'><td class='number'>{e['entry_id']}</td>"
                      f"<td class='number'>{e['score']:.3g}</td><td class='number'>{e['support']}</td>"
                      f"<td class='number'>{e['retrieval_count']}</td>"
                      + "".join(f"<td class='number'>{esc(cell)}</td>" for cell in outcome_cells(e["outcomes"]))
                      + f"<td>{esc(e['verdict'] + status_note(e))}</td><td class='text'>{esc(e['text'])}</td></tr>"
                      for e in rows]
            parts.append("</table>")
    c = view["clusters"]
    parts.append(f"<h2>Clusters</h2><p>{c['count']} clusters, {c['evicted']} evicted, mean uses "
                 f"{c['uses_mean']:.2f}, singleton share {c['singleton_share']:.1%}, {c['with_experiences']} with "
                 "experiences.</p>")
    if c["busiest"]:
        parts.append(f"<p>The {len(c['busiest'])} most used:</p><table><tr><th>cluster</th><th>uses</th>"
                     "<th>linked entries</th><th>observation</th></tr>")
        parts += [f"<tr><td class='number'>{esc(str(b['cluster_id']))}</td>"
                  f"<td class='number'>{esc(str(b['uses']))}</td><td class='number'>{b['linked_entries']}</td>"
                  f"<td class='text'>{esc(str(b['prototype']))}</td></tr>" for b in c["busiest"]]
        parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)

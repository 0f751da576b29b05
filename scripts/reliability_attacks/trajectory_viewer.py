"""Attacks on slea-rl-trajectories (recipe/forge/commands/trajectory_viewer.py) for the reliability report.

all_caught: trajectory_payloads_inert == trajectory_payloads (no tag, handler or second script formed on the
page, no "<" in the Markdown) and trajectory_bad_inputs_caught == trajectory_bad_inputs (missing folder, a file,
an empty folder: one error line, exit 2; torn/foreign lines: one warning each) and trajectory_tracebacks == 0.
A test should assert: result["trajectory_payloads"] == result["trajectory_payloads_inert"] and
result["trajectory_bad_inputs"] == result["trajectory_bad_inputs_caught"].
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from html.parser import HTMLParser
from pathlib import Path

PAYLOADS = ['<script>console.log("PWNED")</script>', '<img src=x onerror="alert(1)">', "</pre></td></tr><b>x</b>",
            "' data-outcome='success' onclick='alert(1)", '<svg onload="alert(2)">', "\x1b[2J\u202eevil \ud800"]
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "p", "label", "select", "option", "span",
             "table", "tr", "th", "td", "pre", "ul", "li", "a", "i", "script"}


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.handlers = [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += sum(key.startswith("on") for key, _ in attrs)


def _line(i: int, text: str) -> dict:
    return {"step": 1, "input": text, "output": text, "score": 0.0, "task": text, "traj_uid": text, "turn": i,
            "observation": text, "action": text, "valid": True, "done": True, "episode_reward": 0.0,
            "success": False, "cluster_id": None, "experience_ids": ["1"],
            "experiences": [{"id": text, "zone": text, "level": text, "text": text, "advice": None}],
            "admissible_actions": [], "expert_action": None}


def attack_trajectory_page(quick: bool) -> dict:
    from recipe.forge.commands.trajectory_viewer import main

    inert = bad_caught = tracebacks = 0
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, payload in enumerate(PAYLOADS):
            folder = root / f"p{i}"
            folder.mkdir()
            (folder / "1.jsonl").write_text(json.dumps(_line(0, payload)) + "\n", encoding="utf-8")
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                assert main([str(folder), "--out", str(folder / "out")]) == 0
            page = Tags()
            page.feed((folder / "out" / "trajectories.html").read_text(encoding="utf-8"))
            md = (folder / "out" / "trajectories.md").read_text(encoding="utf-8")
            if set(page.tags) <= PAGE_TAGS and page.tags.count("script") == 1 and page.handlers == 0 \
                    and "<" not in md.replace("<br>", ""):
                inert += 1
        cases = {"missing": root / "nope", "file": root / "p0" / "1.jsonl", "empty": root / "empty"}
        (root / "empty").mkdir()
        torn = root / "torn"
        torn.mkdir()
        (torn / "1.jsonl").write_text('{"step": 1, "outp\n[1, 2]\n"text"\n{"task": 3}\n', encoding="utf-8")
        for name, folder in [*cases.items(), ("torn", torn)]:
            bad += 1
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    rc = main([str(folder), "--out", str(root / "o" / name)])
            except Exception:  # noqa: BLE001 - a traceback is what the attack counts
                tracebacks += 1
                continue
            lines = err.getvalue().splitlines()
            if name == "torn":
                bad_caught += rc == 0 and len(lines) == 4 and all(line.startswith("warning: ") for line in lines)
            else:
                bad_caught += rc == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    return {"trajectory_payloads": len(PAYLOADS), "trajectory_payloads_inert": inert,
            "trajectory_bad_inputs": bad, "trajectory_bad_inputs_caught": bad_caught,
            "trajectory_tracebacks": tracebacks}

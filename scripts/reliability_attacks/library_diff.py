"""Attacks for scripts/reliability_report.py (issue 24 item 3): ``slea-rl-library diff A B`` fed hostile lesson
text and bad inputs. Real ExperienceSystem checkpoints in a temporary folder; the diff runs in-process through
the console entry point (recipe.forge.commands.library_viewer.main), its stdout and stderr captured.

all_caught condition:
    attack_library_diff: r["diff_bad_inputs_one_line_exit_2"] == r["diff_bad_inputs"] > 0 and r["diff_tracebacks"] == 0
                         and r["diff_console_control_chars"] == 0 and r["diff_markdown_live_tags"] == 0
                         and r["diff_json_non_ascii"] == 0
A test should assert exactly this (one error line and status 2 for: an empty folder, a truncated file, a
foreign JSON file, an edited file failing its checksum, the library of another run, an export into a missing
folder; no control character on the console, no ``<script`` tag in the Markdown, ASCII-only JSON).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from pathlib import Path

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = ['<script>console.log("PWNED")</script>', "clear \x1b[2J\x1b[H title \x1b]0;owned\x07",
           "bidi \u202eevil", '[x](javascript:alert(1)) | cell *b*']


def _system():
    from recipe.forge.config_schema import ForgeConfig
    from recipe.forge.experience import ExperienceSystem

    return ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                    library_save_freq=1000, checkpoint_dir="unused"))


def _run(argv):
    from recipe.forge.commands.library_viewer import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["diff", *map(str, argv)])
        except BaseException as exc:  # noqa: BLE001 - a traceback is what the attack counts
            return "traceback", out.getvalue(), f"{type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def attack_library_diff(quick: bool) -> dict:
    from recipe.forge.experience.library import Candidate

    base = Path(tempfile.mkdtemp(prefix="attack_library_diff_"))
    try:
        system = _system()
        system.library.insert_unchecked([Candidate(f"lesson {i}", "golden", "principle", 1.0) for i in range(3)], 0)
        system.save(base / "a")
        system.library.insert_unchecked([Candidate(t, "warning", "diagnostic", 0.5) for t in HOSTILE], 1)
        system.save(base / "b")
        good = (base / "b" / "experience_library.json").read_bytes()

        bad = {}
        (base / "empty").mkdir()
        bad["empty folder"] = (base / "empty", base / "b")
        (base / "truncated").mkdir()
        (base / "truncated" / "experience_library.json").write_bytes(good[: len(good) // 2])
        bad["truncated"] = (base / "a", base / "truncated")
        (base / "foreign").mkdir()
        (base / "foreign" / "experience_library.json").write_text(json.dumps({"format": "other"}))
        bad["foreign"] = (base / "foreign", base / "b")
        (base / "edited").mkdir()
        (base / "edited" / "experience_library.json").write_bytes(good.replace(b"lesson 1", b"lesson 9"))
        bad["edited"] = (base / "a", base / "edited")
        other = _system()
        other.library.insert_unchecked([Candidate("another run's lesson", "golden", "principle", 1.0)], 0)
        other.save(base / "other")
        bad["another run"] = (base / "other", base / "b")

        cases = [[a, b] for a, b in bad.values()]
        cases.append([base / "a", base / "b", "--export-md", base / "missing" / "diff.md"])
        caught = tracebacks = 0
        for argv in cases:
            code, out, err = _run(argv)
            tracebacks += code == "traceback"
            caught += code == 2 and not out and err.startswith("error: ") and err.count("\n") == 1

        code, console, _ = _run([base / "a", base / "b", "--export-md", base / "diff.md"])
        _, as_json, _ = _run([base / "a", base / "b", "--json"])
        markdown = (base / "diff.md").read_text(encoding="utf-8") if code == 0 else "<script>"
        return {
            "diff_bad_inputs": len(cases), "diff_bad_inputs_one_line_exit_2": caught, "diff_tracebacks": tracebacks,
            "diff_console_control_chars": len(CONTROL.findall(console)) if code == 0 else 1,
            "diff_markdown_live_tags": len(re.findall(r"<\s*script", markdown, re.I)),
            "diff_json_non_ascii": 0 if as_json.isascii() and as_json else 1,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)

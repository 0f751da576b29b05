"""``slea-rl-library diff A B`` on two checkpoints of one real ExperienceSystem: the added, pruned, merged and
re-scored entries match what the two saved libraries hold (computed here from their entries by id), every
output shows a lesson's markup and terminal escapes inert, and a folder that is no library, a damaged file or
the libraries of two different runs give one error line and exit status 2."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.library import Candidate
from recipe.forge.experience.store import load_payload
from recipe.forge.commands.library_viewer import main as library_main

LESSON = '<script>console.log("PWNED")</script> clear \x1b[2J bidi \u202eevil'
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(A, B): a library after iteration 0 and after iterations 1 and 2 of one system (two entries per level,
    so levels fill and prune), B also holding a lesson with markup and escapes and a re-scored entry."""
    from tests.experience.conftest import run_iteration
    from recipe.forge.config_schema import ForgeConfig

    base = tmp_path_factory.mktemp("diff")
    system = ExperienceSystem.from_config(ForgeConfig(
        warmup_iterations=0, min_library_size=0, library_save_freq=1000, checkpoint_dir="unused",
        golden_capacity_per_level=2, warning_capacity_per_level=2))
    run_iteration(system, 0, seed=1)
    system.save(base / "a")
    for iteration in (1, 2):
        run_iteration(system, iteration, seed=10 + iteration)
    # the library's own admission: a twin of an entry with a higher score merges into it and raises its score
    kept = next(iter(system.library.all_entries()))
    assert system.library.admit(Candidate(kept.text, kept.zone, kept.level, kept.score + 1.0), 2)[0] == "merged"
    assert system.library.admit(Candidate(LESSON, "warning", "diagnostic", 99.0), 2)[0] == "added"
    system.save(base / "b")
    return base / "a", base / "b"


def expected(a_dir, b_dir) -> dict[str, set[int]]:
    """The four sets by id, straight from the two saved files."""
    old = {e["entry_id"]: e for e in load_payload(a_dir)["library"]["entries"]}
    new = {e["entry_id"]: e for e in load_payload(b_dir)["library"]["entries"]}
    both = old.keys() & new.keys()
    return {"added": set(new) - set(old), "pruned": set(old) - set(new),
            "merged": {i for i in both if new[i]["support"] > old[i]["support"]},
            "rescored": {i for i in both if new[i]["score"] != old[i]["score"]}}


def run_diff(capsys, *argv):
    code = library_main(["diff", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_diff_lists_what_the_two_libraries_hold_by_id(checkpoints, capsys):
    a_dir, b_dir = checkpoints
    want = expected(a_dir, b_dir)
    assert all(want.values()), f"the two checkpoints must exercise every kind of change, got {want}"
    code, out, _ = run_diff(capsys, a_dir, b_dir, "--json")
    assert code == 0
    diff = json.loads(out)
    entries = {e["entry_id"]: e for e in load_payload(b_dir)["library"]["entries"]}
    entries_a = {e["entry_id"]: e for e in load_payload(a_dir)["library"]["entries"]}
    for kind, ids in want.items():
        found = {}
        for zone, levels in diff["zones"].items():
            for level, kinds in levels.items():
                for row in kinds[kind]:
                    source = entries_a if kind == "pruned" else entries
                    assert (source[row["entry_id"]]["zone"], source[row["entry_id"]]["level"]) == (zone, level)
                    found[row["entry_id"]] = row
        assert set(found) == ids, kind
        assert diff["counts"][kind] == len(ids)
        for i in ids & set(entries_a) & set(entries):
            assert found[i]["old_score"] == entries_a[i]["score"] and found[i]["score"] == entries[i]["score"]
            assert found[i]["support_gained"] == entries[i]["support"] - entries_a[i]["support"]
            assert found[i]["retrievals_gained"] == entries[i]["retrieval_count"] - entries_a[i]["retrieval_count"]
    b_payload = load_payload(b_dir)["library"]
    dropped = set(range(load_payload(a_dir)["library"]["next_id"], b_payload["next_id"])) - set(entries)
    assert diff["added_then_dropped"] == len(dropped)


def test_checkpoint_folders_are_found_and_every_output_is_inert(checkpoints, capsys, tmp_path):
    a_dir, b_dir = checkpoints
    for name, sub, src in (("global_step_1", "library", a_dir), ("global_step_3", "forge_library", b_dir)):
        shutil.copytree(src, tmp_path / name / sub)
    code, out, err = run_diff(capsys, tmp_path / "global_step_1", tmp_path / "global_step_3",
                              "--export-md", tmp_path / "diff.md")
    assert code == 0 and not err
    assert "added " in out and not CONTROL.search(out)
    assert "\\x1b[2J" in out and "\\u202e" in out  # the escapes show as text
    markdown = (tmp_path / "diff.md").read_text(encoding="utf-8")
    assert "&lt;script&gt;" in markdown and "<script>" not in markdown and not CONTROL.search(markdown)
    code, out, _ = run_diff(capsys, a_dir, b_dir, "--json")
    assert code == 0 and out.isascii() and LESSON in out.encode().decode("unicode_escape")


def test_bad_input_is_one_error_line_and_status_2(checkpoints, capsys, tmp_path):
    a_dir, b_dir = checkpoints
    empty = tmp_path / "empty"
    empty.mkdir()
    damaged = tmp_path / "damaged"
    shutil.copytree(b_dir, damaged)
    (damaged / "experience_library.json").write_bytes((b_dir / "experience_library.json").read_bytes()[:-40])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "experience_library.json").write_text('{"format": "something else"}')
    other = tmp_path / "other_run"  # another run: the same ids name other lessons
    system = ExperienceSystem.from_config(load_payload(a_dir)["config"])
    system.library.insert_unchecked([Candidate("a lesson of another run", "golden", "principle", 1.0)], 0)
    system.save(other)
    for a, b, says in ((empty, b_dir, "no experience checkpoint"), (a_dir, damaged, "not valid JSON"),
                       (foreign, b_dir, "not an experience-library checkpoint"),
                       (other, b_dir, "not checkpoints of one run")):
        code, out, err = run_diff(capsys, a, b)
        assert code == 2 and not out, (a, b)
        assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    code, _, err = run_diff(capsys, a_dir, b_dir, "--export-md", tmp_path / "no_such_folder" / "diff.md")
    assert code == 2 and err.startswith("error: cannot write") and err.count("\n") == 1, err

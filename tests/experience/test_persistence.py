"""Checkpoints: round trip, exact resume, damaged files, crash safety under SIGKILL, the viewer CLI."""

import html
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recipe.forge.experience import CheckpointError, ExperienceSystem
from recipe.forge.experience.store import FILENAME, load_payload
from recipe.forge.commands.library_viewer import main as viewer_main
from recipe.forge.safe_text import markdown_text


def _system(cfg, **kw):
    return ExperienceSystem.from_config(cfg(min_library_size=2, warmup_iterations=1, **kw))


def test_round_trip_and_exact_resume(cfg, tmp_path, iterate):
    straight = _system(cfg)
    outputs_straight = [iterate(straight, i, seed=100 + i)[0] for i in range(6)]

    first = _system(cfg)
    for i in range(3):
        iterate(first, i, seed=100 + i)
    first.save(tmp_path)
    resumed = ExperienceSystem.from_checkpoint(tmp_path, cfg(min_library_size=2, warmup_iterations=1))
    assert resumed.state() == first.state()
    outputs_resumed = [iterate(resumed, i, seed=100 + i)[0] for i in range(3, 6)]
    assert outputs_resumed == outputs_straight[3:]
    assert resumed.state() == straight.state()
    assert any(o.text for outs in outputs_resumed for o in outs)  # the check covers injected text, not only empty messages


def test_resume_rejects_a_different_clustering_and_applies_new_capacities(cfg, tmp_path, iterate):
    system = _system(cfg)
    for i in range(3):
        iterate(system, i, seed=60 + i)
    system.save(tmp_path)
    with pytest.raises(CheckpointError, match="obs_similarity_threshold=0.85; the config says"):
        ExperienceSystem.from_checkpoint(tmp_path, cfg(obs_similarity_threshold=0.9))
    with pytest.raises(CheckpointError, match="enable_clustering=True"):
        ExperienceSystem.from_checkpoint(tmp_path, cfg(enable_clustering=False))
    small = ExperienceSystem.from_checkpoint(tmp_path, cfg(golden_capacity_per_level=1, warning_capacity_per_level=1,
                                                           top_k_golden=1, top_k_warning=1))
    assert all(len(ids) <= 1 for ids in small.library.levels.values()) and len(small.library) > 0
    best = max(system.library.level_entries("golden", "method"), key=lambda e: e.rank_key())
    assert [e.entry_id for e in small.library.level_entries("golden", "method")] == [best.entry_id]


def test_evolve_saves_every_library_save_freq(cfg, tmp_path, iterate):
    system = ExperienceSystem.from_config(cfg(library_save_freq=2, checkpoint_dir=str(tmp_path / "ck")))
    iterate(system, 0, seed=1)
    assert not (tmp_path / "ck" / FILENAME).exists()
    iterate(system, 1, seed=2)
    assert load_payload(tmp_path / "ck")["iteration"] == 1


def _damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "bitflip":
        doc = json.loads(raw)
        doc["payload"]["library"]["entries"][0]["score"] += 1.0
        path.write_text(json.dumps(doc))
    elif how == "schema":
        doc = json.loads(raw)
        doc["schema_version"] = 99
        path.write_text(json.dumps(doc))
    elif how == "foreign":
        path.write_text('{"hello": "world"}')


@pytest.mark.parametrize("how, message", [
    ("truncated", "not valid JSON"), ("empty", "not valid JSON"), ("bitflip", "checksum mismatch"),
    ("schema", "schema_version=99"), ("foreign", "not an experience-library checkpoint"),
])
def test_damaged_file_is_a_clear_error_and_never_an_empty_library(cfg, tmp_path, iterate, how, message):
    system = _system(cfg)
    for i in range(2):
        iterate(system, i, seed=7 + i)
    system.save(tmp_path)
    before = system.state()
    _damage(tmp_path / FILENAME, how)
    damaged = (tmp_path / FILENAME).read_bytes()
    with pytest.raises(CheckpointError, match=message):
        system.load(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        ExperienceSystem.from_checkpoint(tmp_path)
    assert system.state() == before  # a failed load leaves the running system untouched
    assert (tmp_path / FILENAME).read_bytes() == damaged  # and does not replace the file


def test_validation_names_the_faulty_field(cfg, tmp_path, iterate):
    from recipe.forge.experience.store import save_payload

    system = _system(cfg)
    iterate(system, 0, seed=3)
    state = system.state()
    del state["library"]["entries"][0]["support"]
    with pytest.raises(CheckpointError, match=r"library.entries\[0\] is missing the field 'support'"):
        save_payload(tmp_path, state)
    state = system.state()
    state["library"]["entries"][0]["level"] = "principle" if state["library"]["entries"][0]["zone"] == "warning" \
        else "mistake"
    with pytest.raises(CheckpointError, match="not a known pair"):
        save_payload(tmp_path, state)
    with pytest.raises(CheckpointError, match="no experience checkpoint"):
        ExperienceSystem.from_checkpoint(tmp_path / "missing")


CHILD = textwrap.dedent("""
    import os
    import sys
    import time
    from recipe.forge.experience import ExperienceSystem, CheckpointError

    rename = os.replace
    def slow_rename(src, dst):  # a save takes ~3 ms here: hold its temp file 20 ms so that kills can land inside
        time.sleep(0.02)
        rename(src, dst)
    os.replace = slow_rename
    from recipe.forge.experience.library import Candidate
    folder = sys.argv[1]
    cfg = dict(golden_capacity_per_level=600, warning_capacity_per_level=50, use_embeddings=False,
               embedding_model="all-MiniLM-L6-v2", success_threshold=0.5, retrieval_mode="observation",
               enable_clustering=True, obs_similarity_threshold=0.85, max_clusters=1000, top_k_golden=2,
               top_k_warning=1, max_experience_length=800, experience_style="compact", library_save_freq=1,
               checkpoint_dir=folder, warmup_iterations=0, min_library_size=0, top_k_trajectories=5,
               max_strategies_per_iter=10, max_warnings_per_iter=5, novelty_threshold=1.0, extractor="rule",
               injection="system", lesson_style="descriptive")
    try:
        system = ExperienceSystem.from_checkpoint(folder, cfg)
    except CheckpointError:
        system = ExperienceSystem.from_config(cfg)
    n = 0
    while True:
        for _ in range(20):
            n += 1
            text = f"strategy number {system.library.next_id} " + "lorem ipsum dolor sit amet " * 20
            system.library.admit(Candidate(text=text, zone="golden", level="method", score=float(n)), 0)
        system.version += 1
        system.save(folder)
        print("saved", system.version, len(system.library), flush=True)
""")


def _wait_for_temp_file(folder: Path, timeout: float = 10.0) -> None:
    """Return as soon as a save is in progress (its temporary file exists)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(name.endswith(".tmp") for name in os.listdir(folder)):
            return
    raise AssertionError("the child never started another save")


@pytest.mark.timeout(180)
def test_sigkill_while_saving_always_leaves_a_loadable_checkpoint(tmp_path):
    last_version, last_size, mid_write = -1, 0, 0
    for round_ in range(10):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        seen = []
        try:
            for line in child.stdout:
                seen.append(line.split())
                if len(seen) >= 2 + round_ % 3:
                    break
            if round_ % 2 == 0:  # during a write, at a varying depth into it
                _wait_for_temp_file(tmp_path)
                time.sleep(0.001 * (round_ % 5))
            else:  # anywhere in the loop
                time.sleep(0.003 * round_)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
        mid_write += any(tmp_path.glob(f".{FILENAME}.*.tmp"))  # killed between creating and renaming the temp file
        payload = load_payload(tmp_path)  # must never fail
        version, size = payload["version"], len(payload["library"]["entries"])
        assert version >= int(seen[-1][1]) > last_version and size >= last_size and size > 0
        last_version, last_size = version, size
    assert mid_write >= 3  # the loop really interrupted writes, not only the pauses between them


def test_viewer_prints_and_exports(cfg, tmp_path, iterate, capsys):
    system = _system(cfg)
    for i in range(3):
        iterate(system, i, seed=20 + i)
    system.save(tmp_path / "ck")
    out_json, out_md, out_html = tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.html"
    code = viewer_main([str(tmp_path / "ck"), "--export-json", str(out_json), "--export-md", str(out_md),
                        "--export-html", str(out_html)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "== golden ==" in printed and "-- principle" in printed and "== clusters ==" in printed
    view = json.loads(out_json.read_text())
    assert set(view["zones"]) == {"golden", "warning"}
    n_entries = sum(len(rows) for levels in view["zones"].values() for rows in levels.values())
    assert n_entries == len(system.library) and view["clusters"]["count"] == len(system.index)
    for levels in view["zones"].values():
        for rows in levels.values():
            assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    some = next(iter(system.library.all_entries()))
    assert markdown_text(some.text) in out_md.read_text() and "<table" in out_html.read_text()
    # both exports list the most used clusters, as the console does; the page carries its own style
    busiest = view["clusters"]["busiest"]
    assert busiest and all(f"| {b['cluster_id']} | {b['uses']} | {b['linked_entries']} |" in out_md.read_text()
                           for b in busiest)
    page = out_html.read_text()
    assert "<style>" in page and page.count("<tr><td class='number'>") == len(busiest)
    assert all(html.escape(b["prototype"]) in page for b in busiest)
    assert viewer_main([str(tmp_path / "ck"), "--zone", "warning", "--top", "1"]) == 0
    one_zone = capsys.readouterr().out
    assert "== golden ==" not in one_zone and one_zone.count("    #") == sum(
        1 for level in ("mistake", "pattern", "diagnostic") if system.library.levels[("warning", level)])
    (tmp_path / "ck" / FILENAME).write_text("{")
    assert viewer_main([str(tmp_path / "ck")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_viewer_entry_point_runs_as_a_program(cfg, tmp_path, iterate):
    system = _system(cfg)
    iterate(system, 0, seed=5)
    system.save(tmp_path)
    done = subprocess.run([sys.executable, "-m", "recipe.forge.commands.library_viewer", str(tmp_path), "--top", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "experience library: iteration 0" in done.stdout


def test_lesson_advice_survives_save_and_load_and_old_libraries_load_without_it(cfg, tmp_path):
    from recipe.forge.experience.library import Advice, Candidate

    system = ExperienceSystem.from_config(cfg())
    advice = Advice(state="Target: 0 Current: 2", do=("-",), avoid=("+",), expert="-")
    system.library.insert_unchecked([
        Candidate("At \"Target: 0 Current: 2\", answer with <action>-</action>.", "golden", "example", 1.0,
                  key="Target: 0 Current: 2", advice=advice),
        Candidate("For tasks like this, follow a plan of this shape: +.", "golden", "principle", 1.0),
    ], iteration=0)
    system.save(tmp_path)
    restored = ExperienceSystem.from_checkpoint(tmp_path, cfg())
    by_level = {e.level: e.advice for e in restored.library.all_entries()}
    assert by_level == {"example": advice, "principle": None}

    path = tmp_path / FILENAME
    document = json.loads(path.read_text())
    for entry in document["payload"]["library"]["entries"]:
        del entry["advice"]  # a library saved before lessons carried advice
    from recipe.forge.experience.store import save_payload

    save_payload(tmp_path, document["payload"])
    old = ExperienceSystem.from_checkpoint(tmp_path, cfg())
    assert [e.advice for e in old.library.all_entries()] == [None, None]

    document["payload"]["library"]["entries"][0]["advice"] = {"state": "s", "do": [3], "avoid": [], "expert": None}
    with pytest.raises(CheckpointError, match=r"advice.do must hold action strings"):
        save_payload(tmp_path, document["payload"])

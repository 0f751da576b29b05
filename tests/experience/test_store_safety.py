"""The library file under attack (issue 14): content that passes the checksum but is not a valid library is a
clean CheckpointError and changes nothing; two writers in one folder never break each other's saves."""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from pathlib import Path

import pytest

from recipe.forge.runs.durable import is_orphan, remove_orphans, temp_name
from recipe.forge.experience import CheckpointError, ExperienceSystem
from recipe.forge.experience.store import FILENAME, _canonical, load_payload, save_payload
from recipe.forge.commands.library_viewer import main as viewer_main


def _saved(cfg, iterate, folder: Path) -> ExperienceSystem:
    system = ExperienceSystem.from_config(cfg(min_library_size=2, warmup_iterations=1))
    for i in range(3):
        iterate(system, i, seed=40 + i)
    system.save(folder)
    return system


def _rewrite(folder: Path, change) -> None:
    """Apply ``change`` to the payload and store it with a matching checksum (a deliberate edit, not damage)."""
    document = json.loads((folder / FILENAME).read_text())
    change(document["payload"])
    document["sha256"] = hashlib.sha256(_canonical(document["payload"])).hexdigest()
    (folder / FILENAME).write_text(json.dumps(document, ensure_ascii=False))


def _entry(payload):
    return payload["library"]["entries"][0]


def _cluster(payload):
    return payload["index"]["clusters"][0]


EDITS = {
    "nan score": (lambda p: _entry(p).update(score=math.nan), "is not a finite number"),
    "huge integer score": (lambda p: _entry(p).update(score=10**400), "is not a finite number"),
    "string cluster id": (lambda p: _entry(p).update(cluster_ids=["3"]), "cluster ids are integers >= 0"),
    "float cluster id": (lambda p: _entry(p).update(cluster_ids=[1.5]), "cluster ids are integers >= 0"),
    "negative support": (lambda p: _entry(p).update(support=-4), "support=-4 must be >= 1"),
    "negative retrieval count": (lambda p: _entry(p).update(retrieval_count=-1), "must be >= 0"),
    "negative shown episodes": (lambda p: _entry(p).update(shown_episodes=-1), "shown_episodes=-1 must be >= 0"),
    "fractional episode count": (lambda p: _entry(p).update(unshown_episodes=1.5), "has the wrong type"),
    "more successes than episodes": (
        lambda p: _entry(p).update(unshown_successes=_entry(p)["unshown_episodes"] + 1),
        "unshown_successes=\\d+ exceeds unshown_episodes"),
    "unknown entry field": (lambda p: _entry(p).update(extra=1), "unknown field 'extra'"),
    "empty text": (lambda p: _entry(p).update(text="  "), "text is empty"),
    "text is a list": (lambda p: _entry(p).update(text=["x"]), "has the wrong type"),
    "entries not a list": (lambda p: p["library"].update(entries={"a": 1}), "has the wrong type"),
    "unknown cluster field": (lambda p: _cluster(p).update(color="red"), "unknown field 'color'"),
    "negative cluster uses": (lambda p: _cluster(p).update(uses=-2), "must be >= 0"),
    "threshold above one": (lambda p: p["index"].update(threshold=3.0), "must be in \\[0, 1\\]"),
    "zero max clusters": (lambda p: p["index"].update(max_clusters=0), "must be >= 1"),
    "negative capacity": (lambda p: p["library"].update(golden_capacity=-1), "must be >= 0"),
    "unknown counter section": (lambda p: p["counters"].update(bogus={}), "unknown section 'bogus'"),
    "unknown retrieval counter": (lambda p: p["counters"]["retrieval"].update(bogus=1), "unknown counter 'bogus'"),
    "text counter": (lambda p: p["counters"]["totals"].update(merged="many"), "must be a finite number >= 0"),
    "iteration is a bool": (lambda p: p.update(iteration=True), "has the wrong type"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_content_with_a_valid_checksum_is_checked_before_anything_changes(cfg, tmp_path, iterate, name):
    change, message = EDITS[name]
    system = _saved(cfg, iterate, tmp_path)
    before = system.state()
    _rewrite(tmp_path, change)
    with pytest.raises(CheckpointError, match=message):
        system.load(tmp_path)
    assert system.state() == before  # nothing half-restored
    with pytest.raises(CheckpointError):
        ExperienceSystem.from_checkpoint(tmp_path)
    assert viewer_main([str(tmp_path), "--quiet"]) == 2  # the viewer's documented exit code, not a traceback


def test_deeply_nested_json_is_a_clean_error(cfg, tmp_path, iterate):
    _saved(cfg, iterate, tmp_path)
    text = (tmp_path / FILENAME).read_text()
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / FILENAME).write_text(text.replace('"config":{', f'"config":{{"deep":{deep},', 1))
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load_payload(tmp_path)
    assert viewer_main([str(tmp_path), "--quiet"]) == 2


def test_a_saved_config_that_cannot_build_a_system_is_a_checkpoint_error(cfg, tmp_path, iterate):
    _saved(cfg, iterate, tmp_path)
    _rewrite(tmp_path, lambda p: p["config"].update(top_k_golden="two"))  # an absent key would take its default
    with pytest.raises(CheckpointError, match="the saved config cannot build an experience system"):
        ExperienceSystem.from_checkpoint(tmp_path)


def test_two_writers_in_one_folder_never_fail_and_leave_a_loadable_file(cfg, tmp_path, iterate):
    system = _saved(cfg, iterate, tmp_path / "first")
    state = system.state()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(40):
                save_payload(tmp_path / "shared", state)
        except BaseException as exc:  # noqa: BLE001  (the test reports any failure)
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert load_payload(tmp_path / "shared") == state
    assert [p.name for p in (tmp_path / "shared").iterdir()] == [FILENAME]


def test_only_a_dead_writers_temporaries_are_removed(tmp_path):
    live = tmp_path / temp_name(FILENAME)  # this process: alive
    live.write_text("partial")
    dead_pid = 2**22 + 12345  # above the kernel's pid_max default of 4194304
    dead = tmp_path / live.name.replace(f".{os.getpid()}.", f".{dead_pid}.")
    dead.write_text("partial")
    other_host = tmp_path / f".{FILENAME}.elsewhere.{dead_pid}.abcdef.tmp"
    other_host.write_text("partial")
    assert is_orphan(dead, FILENAME) and not is_orphan(live, FILENAME) and not is_orphan(other_host, FILENAME)
    remove_orphans(tmp_path, FILENAME)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other_host.name])


"""Every reader of a received file, fed what Python's json cannot read politely (issue 35 items 8 and 9): an
integer of more than 4,300 digits in a library file (the viewer, the diff, the trajectory page, export, a
resume), a line nested a hundred thousand levels deep in a rollout dump or metrics.jsonl, and a library whose
``next_id`` is 10^18 in the diff. Each ends in one line (or a skipped line), never a traceback or a hang."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from agent_system.json_input import JSONInputError, loads
from recipe.forge.commands.export import main as export
from recipe.forge.commands.library_viewer import main as library_main
from recipe.forge.commands.trajectory_viewer import main as trajectories_main
from recipe.forge.experience import CheckpointError, ExperienceSystem
from recipe.forge.runs.checkpoint import load_checkpoint, save_checkpoint
from recipe.forge.runs.tracking import read_metrics

pytestmark = pytest.mark.timeout(120)
HUGE = "9" * 5_000
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """A prompt-only checkpoint of a real library (``global_step_1/library``) and its system."""
    from tests.experience.conftest import run_iteration
    from recipe.forge.config_schema import ForgeConfig

    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                      library_save_freq=1000, checkpoint_dir="unused"))
    for i in range(2):
        run_iteration(system, i, seed=70 + i)
    run = tmp_path_factory.mktemp("bounded") / "run"
    return save_checkpoint(run, 1, rng={}, experience=system), system


def one_error_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


def test_the_reader_names_each_fault_in_one_line():
    for text, says in ((HUGE, "5,000 digits"), (f'{{"a": -{HUGE}}}', "5,000 digits"), (DEEP, "nested too deeply"),
                       (b"\xff\xfe", "not UTF-8"), ('{"a": 1', "not valid JSON")):
        with pytest.raises(JSONInputError, match=says) as caught:
            loads(text, "the input")
        assert "\n" not in str(caught.value) and str(caught.value).startswith("the input ")
    assert loads('{"a": [1, 2.5, -3]}', "x") == {"a": [1, 2.5, -3]} and loads("9" * 4_300, "x") == int("9" * 4_300)


def test_a_library_file_with_a_5000_digit_integer_is_one_line_in_every_reader(library, tmp_path, capsys):
    """Before the fix each of them ended in ValueError: Exceeds the limit (4300 digits) for integer string
    conversion, a traceback."""
    checkpoint, system = library
    copy = tmp_path / "run" / "global_step_1"
    shutil.copytree(checkpoint, copy)
    file = copy / "library" / "experience_library.json"
    file.write_text(re.sub(r'"iteration": ?\d+', f'"iteration": {HUGE}', file.read_text(), count=1))
    capsys.readouterr()
    for argv in ([str(copy / "library")], ["diff", str(copy / "library"), str(checkpoint / "library")]):
        assert library_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert one_error_line(err) and "5,000 digits" in err, err
    dump = tmp_path / "rollouts"
    dump.mkdir()
    (dump / "1.jsonl").write_text("")
    assert trajectories_main([str(dump), "--out", str(tmp_path / "page"), "--library", str(copy / "library")]) == 2
    assert "5,000 digits" in capsys.readouterr().err
    assert export([str(copy), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert one_error_line(err) and "5,000 digits" in err, err
    with pytest.raises(CheckpointError, match="5,000 digits"):
        load_checkpoint(copy, rng={}, experience=ExperienceSystem.from_config(system.cfg))


def test_a_deeply_nested_line_is_skipped_in_a_rollout_dump_and_in_metrics(library, tmp_path, capsys):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    (dump / "1.jsonl").write_text(DEEP + "\n")
    assert trajectories_main([str(dump), "--out", str(tmp_path / "page")]) == 0
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"iteration": 1, "x": 1.0}) + "\n" + DEEP + "\n" + f'{{"iteration": {HUGE}}}\n')
    with pytest.warns(UserWarning, match="metrics.jsonl:2 "):
        assert [r["iteration"] for r in read_metrics(metrics)] == [1]


@pytest.mark.timeout(60)
def test_the_diff_of_a_library_with_a_huge_next_id_ends_at_once(library, tmp_path, capsys):
    """Before the fix the diff counted the added-then-dropped ids one by one, up to next_id: forever."""
    checkpoint, system = library
    grown = ExperienceSystem.from_checkpoint(checkpoint / "library", system.cfg)
    grown.library.next_id = 10**18
    grown.save(tmp_path / "b")
    assert library_main(["diff", str(checkpoint / "library"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    start = json.loads((checkpoint / "library" / "experience_library.json").read_text())["payload"]["library"]["next_id"]
    assert f"added then dropped {10**18 - start}" in out


def test_a_search_corpus_or_qa_file_with_a_huge_integer_is_one_line(tmp_path):
    from agent_system.environments.env_package.search.corpus import load_corpus
    from agent_system.environments.env_package.search.qa_data import load_qa

    corpus, qa = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text('{"id": 1, "contents": "a"}\n' + f'{{"id": {HUGE}, "contents": "b"}}\n')
    qa.write_text(DEEP + "\n")
    for read, path, says in ((load_corpus, corpus, f"{corpus}:2 is not JSON this reads"),
                             (load_qa, qa, f"{qa}:1 is nested too deeply")):
        with pytest.raises(ValueError, match=re.escape(says)) as refused:
            read(str(path))
        assert "\n" not in str(refused.value)


def test_a_model_reply_of_huge_or_deep_json_gives_the_llm_extractor_no_lessons_and_no_crash():
    from recipe.forge.experience.extract_llm import parse_llm_output

    assert parse_llm_output(f"[{HUGE}]", "golden") == ([], 1) and parse_llm_output(DEEP, "golden") == ([], 1)
    assert parse_llm_output('[{"level": "principle", "text": "open the door"}]', "golden") == (
        [("principle", "open the door")], 0)

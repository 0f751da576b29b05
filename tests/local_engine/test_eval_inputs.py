"""``slea-rl eval`` on bad inputs (issue 35 items 8 and 11): every output folder it must not or cannot write is
refused before anything is played, and damaged weights are one line naming the folder, never a traceback."""

from __future__ import annotations

import shutil

import pytest

from recipe.forge.hf.tiny import save_tiny_model_dir
from recipe.forge.commands.eval.evaluate import main as eval_main
from recipe.forge.main_forge import run
from recipe.forge.testing.received import DAMAGED_WEIGHTS, damaged_copy

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One iteration of a tiny Llama, checkpointed, and the overrides it was trained with."""
    from tests.local_engine.conftest import compose, tiny_run_overrides

    root = tmp_path_factory.mktemp("eval_inputs")
    model = save_tiny_model_dir(root / "model")
    overrides = tiny_run_overrides(root / "run") + [f"actor_rollout_ref.model.path={model}", "trainer.save_freq=1",
                                                    "actor_rollout_ref.actor.use_kl_loss=false"]
    run(compose(overrides))
    return root / "run" / "global_step_1", overrides, model


def refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert eval_main([*argv, "--tasks", "1", "--samples", "1", "--no-progress"]) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("slea-rl eval: "), err
    return err


def test_an_output_folder_it_must_not_or_cannot_write_is_refused_before_anything_is_played(tmp_path, checkpoint,
                                                                                             capsys):
    """Before the fix an unwritable --out failed after the first pass was played (a traceback), and --out equal
    to the checkpoint folder was accepted."""
    folder, overrides, _ = checkpoint
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = {folder: "would write into the evaluated checkpoint", folder / "inner": "would write into",
             folder.parent: "would write into", tmp_path / "a_file": "is not a folder",
             tmp_path / "a_file" / "out": "cannot be written", tmp_path / "busy": "holds no earlier evaluation"}
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    for out, says in cases.items():
        assert says in refused([str(folder), "--out", str(out), *overrides], capsys), out
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before
    assert not (folder.parent / "eval").exists()  # nothing was played anywhere
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.txt"]
    # the other library's checkpoint is guarded the same way
    other = tmp_path / "other" / "global_step_1"
    shutil.copytree(folder, other)
    assert "--library-from" in refused([str(folder), "--library-from", str(other), "--out", str(other / "x"),
                                        *overrides], capsys)


@pytest.mark.parametrize("how", DAMAGED_WEIGHTS)
def test_damaged_checkpoint_weights_are_one_line(tmp_path, checkpoint, capsys, how):
    folder, overrides, _ = checkpoint
    source = damaged_copy(folder, tmp_path / how.replace(" ", "_") / "global_step_1", how)
    err = refused([str(source), "--out", str(tmp_path / "out"), *overrides], capsys)
    assert str(source / "policy") in err and "cannot be loaded as the policy" in err


def test_a_damaged_model_folder_is_one_line(tmp_path, checkpoint, capsys):
    _, overrides, model = checkpoint
    broken = tmp_path / "model"
    shutil.copytree(model, broken)
    (broken / "config.json").write_text("{not json")
    err = refused([str(broken), "--out", str(tmp_path / "out"), *overrides], capsys)
    assert str(broken) in err

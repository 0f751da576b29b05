"""``trainer.rollout_data_dir`` dumps validation too: one file per pass and iteration (``val/``, ``val_no_library/``),
one line per validation step, the shown entries as the library saved with the checkpoint holds them; and the
``trainer.val_only`` evaluation of that checkpoint dumps its pass the same way."""

import json

import pytest

from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.experience import LEVELS
from recipe.forge.experience.store import load_payload
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(600)

FIELDS = {"step", "input", "output", "score", "task", "traj_uid", "turn", "observation", "next_observation", "action", "valid", "done",
          "episode_reward", "success", "cluster_id", "experience_ids", "experiences", "admissible_actions",
          "expert_action", "hidden_state", "next_hidden_state"}


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def saved_entries(checkpoint):
    """Entry id -> (zone, level, text) of the library saved in a checkpoint folder."""
    entries = load_payload(checkpoint / "library")["library"]["entries"]
    return {str(e["entry_id"]): (e["zone"], e["level"], e["text"]) for e in entries}


def check_pass(lines, metrics, prefix, iteration):
    """The lines of one pass against its logged metrics: one per step, every field, episodes in turn order."""
    assert len(lines) == metrics[f"{prefix}/num_steps"]
    assert {line["step"] for line in lines} == {iteration}
    episodes = {}
    for line in lines:
        assert set(line) == FIELDS
        assert line["observation"] in line["input"] and "<|im_start|>assistant" in line["input"]
        assert line["admissible_actions"] == ["+", "-"]
        target, current = (int(part.split(":")[1]) for part in line["observation"].splitlines()[-2:])
        assert line["expert_action"] == ("+" if target > current else "-")  # NumberLine's expert, by hand
        episodes.setdefault(line["traj_uid"], []).append(line)
    assert len(episodes) == metrics[f"{prefix}/num_trajectories"]
    for steps in episodes.values():
        assert [s["turn"] for s in steps] == list(range(len(steps)))
        assert sum(s["score"] for s in steps) == pytest.approx(steps[0]["episode_reward"])
    won = [steps[0]["success"] for steps in episodes.values()]
    assert sum(won) / len(won) == pytest.approx(metrics[f"{prefix}/success_rate"])


def check_shown(lines, library):
    """Every shown entry is the library's entry of that id, with its level, and its text is in the prompt."""
    shown = 0
    for line in lines:
        assert [e["id"] for e in line["experiences"]] == line["experience_ids"]
        for entry in line["experiences"]:
            assert (entry["zone"], entry["level"], entry["text"]) == library[entry["id"]]
            assert entry["level"] in LEVELS[entry["zone"]] and entry["text"] in line["input"]
            shown += 1
    return shown


def test_validation_passes_are_dumped_per_iteration(tmp_path, taught_policy, tokenizer, make_tiny, compose_cfg,
                                                    run_overrides):
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy

    dump, run = tmp_path / "rollouts", tmp_path / "run"
    cfg = compose_cfg(run_overrides(run, iterations=2) + [
        f"trainer.rollout_data_dir={dump}", "trainer.test_freq=2", "trainer.val_before_train=true",
        "trainer.save_freq=1", "data.val_batch_size=2"])
    history = LocalTrainer(validate(cfg), Components(policy=taught_policy)).fit()
    assert [h["iteration"] for h in history] == [0, 1, 2]
    assert sorted(p.name for p in dump.iterdir()) == ["1.jsonl", "2.jsonl", "val", "val_no_library"]
    for name in ("val", "val_no_library"):
        assert sorted(p.name for p in (dump / name).iterdir()) == ["0.jsonl", "2.jsonl"]

    before, last = history[0], history[2]
    for prefix in ("val", "val_no_library"):
        for row in (before, last):
            check_pass(read(dump / prefix / f"{row['iteration']}.jsonl"), row, prefix, row["iteration"])
    for iteration in (0, 2):  # the pass without the library: no entry, no cluster
        assert all(not line["experience_ids"] and not line["experiences"] and line["cluster_id"] is None
                   for line in read(dump / "val_no_library" / f"{iteration}.jsonl"))
    assert not any(line["experience_ids"] for line in read(dump / "val" / "0.jsonl"))  # empty library before training
    # after two iterations the library's gates are open: what validation showed is the library of the checkpoint
    # saved after iteration 2, entry by entry
    assert check_shown(read(dump / "val" / "2.jsonl"), saved_entries(run / "global_step_2")) > 0
    # what the held-out states were told, recounted from the dump by hand: a lesson is right when its source step's
    # expert is neither avoided nor missing from a non-empty do list
    told = [e["advice"] for line in read(dump / "val" / "2.jsonl") for e in line["experiences"]]
    checked = [a for a in told if a is not None and a["expert"] is not None]
    right = [a for a in checked if a["expert"] not in a["avoid"] and (not a["do"] or a["expert"] in a["do"])]
    assert last["val/forge/lessons_checkable"] == pytest.approx(len(checked) / len(told))
    if checked:
        assert last["val/forge/lesson_precision"] == pytest.approx(len(right) / len(checked))
    assert not any(key.startswith("val_no_library/forge/lesson") for key in last)
    # training steps name their entries too, as the library held them when the rollout ran (saved after iteration 1)
    assert check_shown(read(dump / "2.jsonl"), saved_entries(run / "global_step_1")) > 0

    # val_only on the last checkpoint dumps its passes under the checkpoint's iteration
    eval_dump = tmp_path / "eval_rollouts"
    evaluator_cfg = compose_cfg(run_overrides(tmp_path / "eval", iterations=2) + [
        f"trainer.rollout_data_dir={eval_dump}", "trainer.val_only=true", "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={run / 'global_step_2'}", "data.val_batch_size=2"])
    policy = build_policy(PolicyConfig(path="tiny", use_reference=True), model=make_tiny(seed=0), tokenizer=tokenizer)
    [evaluated] = LocalTrainer(validate(evaluator_cfg), Components(policy=policy)).fit()
    assert sorted(p.relative_to(eval_dump).as_posix() for p in eval_dump.rglob("*.jsonl")) == [
        "val/2.jsonl", "val_no_library/2.jsonl"]
    for prefix in ("val", "val_no_library"):
        check_pass(read(eval_dump / prefix / "2.jsonl"), evaluated, prefix, 2)
    assert check_shown(read(eval_dump / "val" / "2.jsonl"), saved_entries(run / "global_step_2")) > 0

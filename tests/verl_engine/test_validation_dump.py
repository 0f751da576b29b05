"""The verl engine's validation dump without Ray: the agent loop's rows of an episode, read back through the row
codec, give the same lines, field for field, as the embedded engine writes from the same StepRecords; the replay
buffer tap keeps the validation batches only."""

from __future__ import annotations

import json

import pytest

from agent_system.multi_turn_rollout.protocols import GenerationOutput, StepExperience, StepQuery, TrajectoryRecord
from agent_system.multi_turn_rollout.step import finish_step, prepare_steps
from recipe.forge.runs.rollout_dump import RolloutDump, decoded_prompt, shown_entries, step_lines
from recipe.forge.engines.verl.agent_loop import EpisodeStep, ServerGeneration, episode_outputs
from recipe.forge.engines.verl.episode import EpisodeView, StepOutcome
from recipe.forge.engines.verl.row_codec import trajectories_from_rows
from recipe.forge.engines.verl.validation_dump import ValidationRowTap, write_validation
from recipe.forge.experience import Candidate, ExperienceLibrary


def decode(ids):
    return " ".join(f"t{i}" for i in ids)


class FixedProvider:
    """Shows entries 0 and 7 (7: not in the library any more) at every step, in cluster 3."""

    def provide(self, queries):
        return [StepExperience("Do: go left", 3, ("0", "7")) for _ in queries]

    def shown(self, queries, experiences):
        """It learns nothing from what steps are shown."""


def library():
    lib = ExperienceLibrary()
    lib.insert_unchecked([Candidate("At \"Target: 0 Current: 1\", answer with <action>-</action>.", "golden",
                                    "example", 1.0, key="Target: 0\nCurrent: 1")], iteration=0)
    return lib


def episode(traj_uid, observations, actions, won):
    """The EpisodeSteps of one NumberLine-like episode: one step per observation, the last one ends it."""
    steps = []
    for index, (obs, action) in enumerate(zip(observations, actions)):
        view = EpisodeView(prompt=f"prompt {obs}", anchor_obs=obs, image=None, task="reach the target",
                           task_type=None, admissible_actions=("+", "-"))
        query = StepQuery(anchor_obs=obs, task=view.task, task_type=None, uid=traj_uid.rsplit("-", 1)[0],
                          traj_uid=traj_uid, step=index, admissible_actions=view.admissible_actions)
        [prepared] = prepare_steps([query], [view.prompt], [None], FixedProvider())
        last = index == len(observations) - 1
        reward = 1.0 if (last and won) else -0.1
        valid = action in ("+", "-")
        info = {"action": action, "is_action_valid": valid}
        output = GenerationOutput(f"<action>{action}</action>", [100 + index, 7], [5, 6], [-0.5, -0.5])
        outcome = StepOutcome(reward=reward, done=last, is_action_valid=valid, action=action, won=won and last,
                              failure_reason=None, info=info)
        record = finish_step(prepared, output, reward, last, info)
        record.expert_action = "-"  # an environment with an expert fills it in
        generation = ServerGeneration(output, has_logprobs=True, multi_modal_data=None, server_fields={})
        steps.append(EpisodeStep(record, prepared.experience, view, outcome, generation, 0.1, None))
    return steps


def as_trajectory(steps, won):
    records = [s.record for s in steps]
    return TrajectoryRecord(uid=records[0].uid, traj_uid=records[0].traj_uid, task="reach the target", task_type=None,
                            steps=records, episode_reward=sum(r.reward for r in records), success=won,
                            length=len(records))


def test_verl_validation_rows_give_the_embedded_engines_lines(tmp_path):
    episodes = [(episode("u-0", ["Target: 0\nCurrent: 2", "Target: 0\nCurrent: 1"], ["-", "-"], True), True),
                (episode("u-1", ["Target: 0\nCurrent: 2"], ["?"], False), False)]
    lib = library()
    trajectories = [as_trajectory(steps, won) for steps, won in episodes]
    embedded = step_lines(trajectories, 4, decoded_prompt(decode), shown_entries(trajectories, lib))

    outputs = [out for steps, _ in episodes for out in episode_outputs(steps, 0.5, eos_token_id=0)]
    rows = [{**out.extra_fields, "prompt_ids": list(out.prompt_ids)} for out in reversed(outputs)]  # any row order
    path = write_validation(RolloutDump(tmp_path, decoded_prompt(decode)), trajectories_from_rows(rows), 4, lib)
    assert path == tmp_path / "val" / "4.jsonl"
    verl = [json.loads(line) for line in path.read_text().splitlines()]

    by_step = {(line["traj_uid"], line["turn"]): line for line in verl}
    assert len(by_step) == len(verl) == len(embedded) == 3
    for line in embedded:
        assert by_step[(line["traj_uid"], line["turn"])] == line
    first = embedded[0]  # hand-checked: what each field holds
    assert first["input"] == "t100 t7" and first["output"] == "<action>-</action>" and first["action"] == "-"
    assert first["score"] == -0.1 and first["episode_reward"] == pytest.approx(0.9) and first["success"] is True
    assert first["cluster_id"] == 3 and first["experience_ids"] == ["0", "7"] and first["expert_action"] == "-"
    assert first["experiences"] == [
        {"id": "0", "zone": "golden", "level": "example",
         "text": "At \"Target: 0 Current: 1\", answer with <action>-</action>.", "advice": None},
        {"id": "7", "zone": None, "level": None, "text": None, "advice": None}]  # gone from the library
    assert [line["done"] for line in embedded] == [False, True, True]
    assert embedded[2]["valid"] is False and embedded[2]["admissible_actions"] == ["+", "-"]


def test_rows_of_another_agent_loop_are_refused(tmp_path):
    with pytest.raises(ValueError, match="default_agent_loop=forge_agent"):
        trajectories_from_rows([{"prompt_ids": [1]}])


def test_the_tap_keeps_validation_batches_only():
    class Buffer:
        poll_interval = 0.5

        def sample(self, global_steps, partition_id, batch_size):
            return f"{partition_id}-{global_steps}-{batch_size}", {"m": 1.0}

    kept = []
    tap = ValidationRowTap(Buffer(), kept.append)
    assert tap.sample(global_steps=3, partition_id="train", batch_size=2) == ("train-3-2", {"m": 1.0})
    assert tap.sample(global_steps=3, partition_id="val", batch_size=4) == ("val-3-4", {"m": 1.0})
    assert kept == ["val-3-4"] and tap.poll_interval == 0.5

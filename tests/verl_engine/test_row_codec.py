"""The verl row codec: a StepRecord, its episode and its extras go into a row's extra_fields and come back equal,
every field of each (a field added to a record is carried, or these tests fail), token fields stay in verl's
columns, image pixels stay out, and the step samples read the rows the codec writes."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.engines.verl.row_codec import (TOKEN_FIELDS, StepExtras, episode_fields, extras_from_row,
                                                 record_from_row, row_from_record, samples_from_rows, step_fields,
                                                 trajectories_from_rows, without_pixels)
from recipe.forge.step_samples import StepSamples

VERL_KEYS = ("reward_extra_info", "min_global_steps", "max_global_steps")  # the agent loop adds them, for verl


def record_a() -> StepRecord:
    return StepRecord(
        uid="u", traj_uid="u-0", step=1, anchor_obs="room A",
        messages=[{"role": "system", "content": "tip"},
                  {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "the room"}]}],
        plain_messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "the room"}]}],
        response_text="<action>go</action>", action="go", prompt_ids=[1, 2, 3], response_ids=[4, 5],
        logprobs=[-0.5, -0.25], reward=-0.1, is_action_valid=True, done=False, cluster_id=None,
        experience_ids=("3", "9"), experience_fallback=True,
        info={"won": False, "admissible_actions": ["go", "wait"], "scores": {"k": [1, 2]}},
        admissible_actions=("go", "wait"), expert_action=None,
    )


def record_b() -> StepRecord:
    """A record that differs from :func:`record_a` in every field."""
    return StepRecord(
        uid="v", traj_uid="v-1", step=4, anchor_obs="room B", messages=[{"role": "user", "content": "plain text"}],
        plain_messages=[{"role": "user", "content": "other text"}], response_text="<action>wait</action>",
        action="wait", prompt_ids=[9], response_ids=[8, 7, 6], logprobs=[-1.0], reward=10.0, is_action_valid=False,
        done=True, cluster_id=12, experience_ids=(), info={}, admissible_actions=(), expert_action="go",
        experiences_dropped=2, policy_version=3, policy_version_last=4, library_version=2, next_anchor_obs="room C",
        hidden_state="holds key", next_hidden_state="holds nothing",
    )


def episode_a() -> TrajectoryRecord:
    return TrajectoryRecord(uid="u", traj_uid="u-0", task="push the box", task_type=None, steps=[],
                            episode_reward=9.9, success=True, length=3, failure_reason=None)


def episode_b() -> TrajectoryRecord:
    return TrajectoryRecord(uid="v", traj_uid="v-1", task="heat the egg", task_type="heat", steps=[],
                            episode_reward=-0.2, success=False, length=5, failure_reason="step timeout")


EXTRAS_A = StepExtras(experience_text="", student_prompt_ids=None)
EXTRAS_B = StepExtras(experience_text="Do: go",
                      student_prompt_ids=[5, 6], agent_worker="node-1:4242", rollout_server="slea_rl_hf_server_1")


def tokens_of(record: StepRecord) -> dict:
    """What a reader of verl's columns adds to a row: the token fields under their StepRecord names."""
    return {name: getattr(record, name) for name in TOKEN_FIELDS}


def round_trip(record: StepRecord) -> StepRecord:
    return record_from_row({**row_from_record(record, episode_a(), EXTRAS_A), **tokens_of(record)})


def test_a_hand_built_record_comes_back_equal():
    record = record_a()
    decoded = round_trip(record)
    assert decoded == record
    assert decoded.experience_ids == ("3", "9") and decoded.admissible_actions == ("go", "wait")  # tuples again
    assert decoded.expert_action is None and decoded.cluster_id is None
    assert decoded.messages[1]["content"][1] == {"type": "text", "text": "the room"}
    assert decoded.info["scores"] == {"k": [1, 2]}


def test_the_rows_hold_plain_lists_and_leave_the_tokens_to_verls_columns():
    row = row_from_record(record_a(), episode_a(), EXTRAS_A)
    assert row["experience_ids"] == ["3", "9"] and type(row["experience_ids"]) is list  # compared to JSON lists
    assert row["admissible_actions"] == ["go", "wait"]
    assert not set(TOKEN_FIELDS) & set(row)
    assert record_from_row(row).prompt_ids == [] and record_from_row(row).logprobs == []


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(StepRecord)])
def test_every_step_record_field_is_carried(name):
    """Each field of record_b put into record_a comes back, and only it changes. A new StepRecord field fails
    here until record_a and record_b give it different values."""
    a, b = record_a(), record_b()
    assert getattr(a, name) != getattr(b, name), f"record_a and record_b must differ in {name!r}"
    decoded = round_trip(dataclasses.replace(a, **{name: getattr(b, name)}))
    assert getattr(decoded, name) == getattr(b, name)
    assert decoded == dataclasses.replace(a, **{name: getattr(b, name)})


@pytest.mark.parametrize("name", [f.name for f in episode_fields()])
def test_every_episode_field_is_carried(name):
    """As for the steps: every TrajectoryRecord field but the ones the steps carry (uid, traj_uid) and the steps."""
    a, b = episode_a(), episode_b()
    assert getattr(a, name) != getattr(b, name), f"episode_a and episode_b must differ in {name!r}"
    episode = dataclasses.replace(a, **{name: getattr(b, name)})
    row = {**row_from_record(record_a(), episode, EXTRAS_A), **tokens_of(record_a())}
    [trajectory] = trajectories_from_rows([row])
    assert trajectory == dataclasses.replace(episode, steps=[record_a()])


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(StepExtras)])
def test_every_extra_is_carried(name):
    assert getattr(EXTRAS_A, name) != getattr(EXTRAS_B, name), f"EXTRAS_A and EXTRAS_B must differ in {name!r}"
    extras = dataclasses.replace(EXTRAS_A, **{name: getattr(EXTRAS_B, name)})
    assert extras_from_row(row_from_record(record_a(), episode_a(), extras)) == extras


def test_row_keys_are_distinct_and_leave_verls_keys_free():
    row = row_from_record(record_a(), episode_a(), EXTRAS_A)
    carried = len(step_fields()) + len(episode_fields()) + len(dataclasses.fields(StepExtras))
    assert len(row) == carried  # no two fields share a key
    assert not set(VERL_KEYS) & set(row)


def test_rows_come_back_as_trajectories_ordered_by_step_whatever_the_row_order():
    steps = [dataclasses.replace(record_b(), step=i, done=i == 2, reward=float(i)) for i in range(3)]
    other = dataclasses.replace(record_a(), traj_uid="u-1")
    rows = [row_from_record(r, episode_b(), EXTRAS_A) for r in (steps[2], steps[0])]
    rows += [row_from_record(other, episode_a(), EXTRAS_A), row_from_record(steps[1], episode_b(), EXTRAS_A)]
    first, second = trajectories_from_rows(rows)
    assert first.traj_uid == "v-1" and [s.step for s in first.steps] == [0, 1, 2]
    assert [s.done for s in first.steps] == [False, False, True]
    assert (first.task, first.task_type, first.failure_reason, first.length) == ("heat the egg", "heat",
                                                                                  "step timeout", 5)
    assert second.traj_uid == "u-1" and second.uid == "u" and len(second.steps) == 1 and second.success


def test_image_parts_travel_without_their_pixels():
    image = np.zeros((4, 4, 3), np.uint8)
    record = dataclasses.replace(record_a(), messages=[
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "the room"}]}])
    decoded = round_trip(record)
    assert decoded.messages == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "the room"}]}]
    assert decoded.messages == without_pixels(record.messages)
    assert record.messages[0]["content"][0]["image"] is image  # the record itself keeps its image


def test_a_row_without_a_field_is_refused_by_name():
    row = row_from_record(record_a(), episode_a(), EXTRAS_A)
    del row["anchor_obs"]
    with pytest.raises(KeyError, match="anchor_obs"):
        record_from_row(row)


def test_rows_of_another_agent_loop_are_named():
    rows = [row_from_record(record_a(), episode_a(), EXTRAS_A), {"reward_extra_info": {}}]
    with pytest.raises(ValueError, match=r"1 batch rows \(first: 1\).*default_agent_loop=forge_agent"):
        samples_from_rows(rows)


def test_the_step_samples_read_the_rows_the_codec_writes():
    records = [record_a(), dataclasses.replace(record_b(), cluster_id=5), dataclasses.replace(record_a(), step=0)]
    episodes = {"u-0": episode_a(), "v-1": episode_b()}
    rows = [row_from_record(r, episodes[r.traj_uid], EXTRAS_A) for r in records]
    from_rows = samples_from_rows(rows)
    from_records = StepSamples.from_records(records, {t: e.episode_reward for t, e in episodes.items()},
                                            {t: e.success for t, e in episodes.items()})
    for name, value in vars(from_records).items():
        assert getattr(from_rows, name).tolist() == value.tolist(), name


# ------------------------------------------------------------------------------------------- property test
TEXT = st.text(max_size=6)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=6)
PART = st.one_of(st.builds(lambda text: {"type": "text", "text": text}, TEXT), st.just({"type": "image"}))
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                           "content": TEXT | st.lists(PART, max_size=3)}), max_size=3)
FLOATS = st.floats(allow_nan=False)
# fields whose type hypothesis cannot draw from (Any) or draws NaN for; every other field is drawn from its type
DRAWN_AS = {"messages": MESSAGES, "plain_messages": MESSAGES, "info": st.dictionaries(TEXT, JSON, max_size=3),
            "logprobs": st.lists(FLOATS, max_size=3), "reward": FLOATS, "episode_reward": FLOATS}


def instances(cls, **fixed):
    hints = typing.get_type_hints(cls)
    drawn = {f.name: DRAWN_AS.get(f.name, st.from_type(hints[f.name])) for f in dataclasses.fields(cls)}
    return st.builds(cls, **{**drawn, **fixed})


@settings(max_examples=60, deadline=None)
@given(record=instances(StepRecord), episode=instances(TrajectoryRecord, steps=st.just([])),
       extras=instances(StepExtras))
def test_any_record_episode_and_extras_come_back_equal(record, episode, extras):
    row = row_from_record(record, episode, extras)
    assert record_from_row({**row, **tokens_of(record)}) == record
    assert extras_from_row(row) == extras
    [trajectory] = trajectories_from_rows([{**row, **tokens_of(record)}])
    assert trajectory == dataclasses.replace(episode, uid=record.uid, traj_uid=record.traj_uid, steps=[record])

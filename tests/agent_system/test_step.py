"""The step path both engines share (agent_system/multi_turn_rollout/step.py): messages by placement, one provider
call per step batch, and StepRecords from the generation and the environment's answer."""

from __future__ import annotations

import numpy as np
import pytest

from agent_system.multi_turn_rollout.protocols import GenerationOutput, StepExperience, StepQuery
from agent_system.multi_turn_rollout.step import build_messages, finish_step, prepare_steps, response_text


def query(step: int = 0, anchor: str = "room") -> StepQuery:
    return StepQuery(anchor_obs=anchor, task="find the key", task_type="pick", uid="u", traj_uid="u-0", step=step)


class RecordingProvider:
    def __init__(self, experiences):
        self.experiences = experiences
        self.calls: list[list[StepQuery]] = []

    def provide(self, queries):
        self.calls.append(list(queries))
        return self.experiences[: len(queries)]


@pytest.mark.parametrize("placement, expected", [
    ("system", [{"role": "system", "content": "tip"}, {"role": "user", "content": "prompt"}]),
    ("user_prefix", [{"role": "user", "content": "tip\n\nprompt"}]),
    ("user_suffix", [{"role": "user", "content": "prompt\n\ntip"}]),
])
def test_build_messages_places_the_experience_and_keeps_a_plain_view(placement, expected):
    messages, plain = build_messages("prompt", None, StepExperience("tip", placement=placement))
    assert messages == expected
    assert plain == [{"role": "user", "content": "prompt"}]


def test_build_messages_without_experience_text_is_the_plain_prompt_for_every_placement():
    for placement in ("system", "user_prefix", "user_suffix"):
        messages, plain = build_messages("prompt", None, StepExperience("", placement=placement))
        assert messages == plain == [{"role": "user", "content": "prompt"}]


def test_build_messages_passes_the_image_through_as_given():
    image = np.zeros((2, 2, 3), np.uint8)
    messages, plain = build_messages("prompt", image, StepExperience("tip"))
    for user in (messages[-1], plain[-1]):
        assert user["content"][0]["image"] is image and user["content"][1] == {"type": "text", "text": "prompt"}


def test_prepare_steps_asks_the_provider_once_for_all_queries_in_order():
    experiences = [StepExperience("a", cluster_id=1, entry_ids=("7",)), StepExperience("", cluster_id=2)]
    provider = RecordingProvider(experiences)
    queries = [query(0, "hall"), query(0, "room")]
    prepared = prepare_steps(queries, ["p0", "p1"], [None, None], provider)
    assert provider.calls == [queries]
    assert [p.query for p in prepared] == queries and [p.experience for p in prepared] == experiences
    assert prepared[0].messages == [{"role": "system", "content": "a"}, {"role": "user", "content": "p0"}]
    assert prepared[1].messages == prepared[1].plain_messages == [{"role": "user", "content": "p1"}]


def test_prepare_steps_without_provider_gives_empty_experiences():
    [prepared] = prepare_steps([query()], ["p"], [None], None)
    assert prepared.experience == StepExperience() and prepared.messages == [{"role": "user", "content": "p"}]


def test_prepare_steps_rejects_misaligned_inputs_and_short_provider_answers():
    with pytest.raises(ValueError, match="2 queries, 1 prompts"):
        prepare_steps([query(), query()], ["p"], [None, None], None)
    with pytest.raises(ValueError, match="returned 1 results for 2 queries"):
        prepare_steps([query(), query()], ["p", "q"], [None, None], RecordingProvider([StepExperience()]))


def test_finish_step_records_the_generation_the_environment_answer_and_the_experience():
    experience = StepExperience("tip", cluster_id=4, entry_ids=("3", "9"))
    [prepared] = prepare_steps([query(2)], ["p"], [None], RecordingProvider([experience]))
    output = GenerationOutput("<action>go</action>", [1, 2, 3], [4, 5], [-0.5, -0.25])
    info = {"action": "go", "is_action_valid": True, "won": False, "image": np.zeros((2, 2, 3))}
    record = finish_step(prepared, output, 1.5, True, info)
    assert (record.uid, record.traj_uid, record.step, record.anchor_obs) == ("u", "u-0", 2, "room")
    assert record.messages == prepared.messages and record.plain_messages == [{"role": "user", "content": "p"}]
    assert (record.response_text, record.action, record.reward, record.done) == ("<action>go</action>", "go", 1.5, True)
    assert (record.prompt_ids, record.response_ids, record.logprobs) == ([1, 2, 3], [4, 5], [-0.5, -0.25])
    assert record.is_action_valid is True and record.cluster_id == 4 and record.experience_ids == ("3", "9")
    assert record.info == {"action": "go", "is_action_valid": True, "won": False}  # the image is not kept
    assert "image" in info  # the caller's info is left as it was


def test_finish_step_without_projection_info_is_an_invalid_empty_action():
    [prepared] = prepare_steps([query()], ["p"], [None], None)
    record = finish_step(prepared, GenerationOutput("", [1], [], []), 0.0, False, {})
    assert record.action == "" and record.is_action_valid is False and record.cluster_id is None


def test_response_text_replaces_unencodable_characters():
    assert response_text(GenerationOutput("ok\ud800!", [], [], [])) == "ok\ufffd!"

"""Experience placement: the one message builder both engines use, and the local rollout following the
provider's placement."""

from __future__ import annotations

import numpy as np
import pytest

from agent_system.environments import make_envs
from agent_system.multi_turn_rollout.injection import INJECTIONS, experience_messages
from agent_system.multi_turn_rollout.protocols import SamplingParams, StepExperience
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.testing.configs import run_config
from agent_system.testing.policies import RandomGenerator

PROMPT = "Target: 2\nCurrent: 1\nAnswer inside <action> </action> tags."
LESSON = "Do: answer with <action>+</action>."


def test_each_placement_puts_the_text_where_it_says():
    assert experience_messages(LESSON, PROMPT, "system") == [
        {"role": "system", "content": LESSON}, {"role": "user", "content": PROMPT}]
    assert experience_messages(LESSON, PROMPT, "user_prefix") == [
        {"role": "user", "content": LESSON + "\n\n" + PROMPT}]
    assert experience_messages(LESSON, PROMPT, "user_suffix") == [
        {"role": "user", "content": PROMPT + "\n\n" + LESSON}]


@pytest.mark.parametrize("placement", INJECTIONS)
def test_no_experience_gives_the_plain_prompt_and_images_keep_their_part(placement):
    assert experience_messages("", PROMPT, placement) == [{"role": "user", "content": PROMPT}]
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    messages = experience_messages(LESSON, PROMPT, placement, image)
    user = messages[-1]["content"]
    assert user[0]["image"] is image and user[1]["type"] == "text"
    # the lesson appears exactly once, wherever it goes, and the prompt is intact
    texts = [m["content"] for m in messages[:-1]] + [user[1]["text"]]
    assert sum(t.count(LESSON) for t in texts) == 1 and PROMPT in user[1]["text"]


def test_an_unknown_placement_is_named():
    with pytest.raises(ValueError, match=r"injection='assistant' is not one of \['system', 'user_prefix', 'user_suffix'\]"):
        experience_messages(LESSON, PROMPT, "assistant")


class SuffixProvider:
    def provide(self, queries):
        return [StepExperience(text=f"lesson {q.step}", cluster_id=0, placement="user_suffix") for q in queries]

    def shown(self, queries, experiences):
        """It learns nothing from what steps are shown."""


def test_the_local_rollout_places_experiences_as_the_provider_says():
    envs = make_envs(run_config("gym_cards/NumberLine-v0", n=2, train_b=1))[0]
    batch = TrajectoryCollector().collect(envs, RandomGenerator(envs), SamplingParams(), experience_provider=SuffixProvider())
    for step in batch.steps:
        assert [m["role"] for m in step.messages] == ["user"]
        assert step.messages[0]["content"] == step.plain_messages[0]["content"] + f"\n\nlesson {step.step}"

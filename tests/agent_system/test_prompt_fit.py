"""The prompt-length rule both engines follow (agent_system/multi_turn_rollout/prompt_fit.py): experiences give way
from the last shown entry, the bare prompt is never cut, and a bare prompt that does not fit stops the run."""

from __future__ import annotations

import pytest

from agent_system.config_checks import ConfigError
from agent_system.environments import make_envs
from agent_system.multi_turn_rollout.prompt_fit import (PromptBudget, fit_prompt, prompt_metrics, shorter_versions,
                                                        without_last_entries)
from agent_system.multi_turn_rollout.protocols import SamplingParams, StepExperience, StepQuery
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.multi_turn_rollout.step import prepare_steps
from agent_system.testing.configs import run_config
from agent_system.testing.policies import RandomGenerator

THREE = StepExperience("Lessons from past episodes:\nWorked: go left\nWorked: push up\nFailed: wait", cluster_id=1,
                       entry_ids=("4", "7", "2"))


class Fixed:
    def __init__(self, experience: StepExperience):
        self.experience = experience
        self.shown_steps: list[tuple[StepQuery, StepExperience]] = []

    def provide(self, queries):
        return [self.experience for _ in queries]

    def shown(self, queries, experiences):
        self.shown_steps.extend(zip(queries, experiences))


def prepared(experience: StepExperience = THREE, prompt: str = "the room"):
    query = StepQuery(anchor_obs="room", task="t", task_type=None, uid="u", traj_uid="u-0", step=3)
    [step] = prepare_steps([query], [prompt], [None], Fixed(experience))
    return step


def characters(messages) -> int:
    """A stand-in tokenizer: one token per character of the messages' contents."""
    return sum(len(m["content"]) for m in messages)


def test_entries_are_dropped_from_the_last_with_their_ids():
    assert without_last_entries(THREE, 1) == StepExperience(
        "Lessons from past episodes:\nWorked: go left\nWorked: push up", 1, ("4", "7"))
    assert without_last_entries(THREE, 2) == StepExperience("Lessons from past episodes:\nWorked: go left", 1, ("4",))
    assert without_last_entries(THREE, 3) == StepExperience("", 1, ())  # the header goes with the last entry


def test_the_versions_run_from_the_prepared_step_to_the_bare_prompt():
    step = prepared()
    versions = shorter_versions(step, "the room", None)
    assert versions[0] is step
    assert [v.experiences_dropped for v in versions] == [0, 1, 2, 3]
    assert [len(v.experience.entry_ids) for v in versions] == [3, 2, 1, 0]
    assert versions[-1].messages == versions[-1].plain_messages == step.plain_messages  # the bare prompt
    assert all(v.messages[-1] == step.messages[-1] for v in versions)  # the observation is never touched


def test_a_text_not_in_the_renderers_shape_can_only_be_dropped_whole():
    foreign = StepExperience("a tip\nspread over lines\nthree of them", cluster_id=2, entry_ids=("9",))
    versions = shorter_versions(prepared(foreign), "the room", None)
    assert [v.experiences_dropped for v in versions] == [0, 1] and versions[1].experience.text == ""


def test_the_first_version_that_fits_is_taken_and_counted_lazily():
    step = prepared()
    versions = shorter_versions(step, "the room", None)
    lengths = [characters(v.messages) for v in versions]
    counted = []

    def lazily():
        for v in versions:
            counted.append(v)
            yield characters(v.messages)

    chosen = fit_prompt(versions, lazily(), limit=lengths[1])
    assert chosen is versions[1] and len(counted) == 2  # the rest were never counted
    assert fit_prompt(versions, lengths, limit=lengths[0]) is step  # a prompt that fits stays as prepared
    assert fit_prompt(versions, lengths, limit=lengths[-1]) is versions[-1]


def test_a_bare_prompt_that_does_not_fit_is_an_error_naming_the_key():
    versions = shorter_versions(prepared(), "the room", None)
    bare = characters(versions[-1].messages)
    with pytest.raises(ConfigError, match=rf"rollout.prompt_length={bare - 1} is shorter .*step 3 of 'u-0'.*\({bare} tokens\)"):
        fit_prompt(versions, [characters(v.messages) for v in versions], limit=bare - 1)


def experience_characters(messages) -> int:
    """A stand-in tokenizer that counts the experience (system) message only."""
    return len(messages[0]["content"]) if messages[0]["role"] == "system" else 0


def test_the_collector_fits_every_step_and_counts_what_it_dropped():
    envs = make_envs(run_config("sokoban", n=2, train_b=2))[0]
    roomy = PromptBudget(limit=len(THREE.text), count=experience_characters)
    batch = TrajectoryCollector(prompt_budget=roomy).collect(envs, RandomGenerator(envs), SamplingParams(),
                                                             experience_provider=Fixed(THREE))
    assert all(s.experiences_dropped == 0 and s.experience_ids == THREE.entry_ids for s in batch.steps)
    assert batch.metrics["prompt/trimmed_steps"] == batch.metrics["prompt/experiences_dropped"] == 0.0

    first_entry = "Lessons from past episodes:\nWorked: go left"
    tight = PromptBudget(limit=len(first_entry), count=experience_characters)
    provider = Fixed(THREE)
    batch = TrajectoryCollector(prompt_budget=tight).collect(envs, RandomGenerator(envs), SamplingParams(),
                                                             experience_provider=provider)
    # the provider is told what each step shows after the rule, once per step, before it is generated
    assert sorted((q.traj_uid, q.step) for q, _ in provider.shown_steps) == sorted((s.traj_uid, s.step)
                                                                                  for s in batch.steps)
    assert all(e.entry_ids == ("4",) for _, e in provider.shown_steps)
    for s in batch.steps:
        assert s.experiences_dropped == 2 and s.experience_ids == ("4",)
        assert s.messages[0] == {"role": "system", "content": first_entry}
        assert s.messages[-1] == s.plain_messages[-1]  # the observation, whole
    assert batch.metrics["prompt/trimmed_steps"] == len(batch.steps)
    assert batch.metrics["prompt/experiences_dropped"] == 2 * len(batch.steps)
    assert prompt_metrics(batch.steps) == {"prompt/trimmed_steps": len(batch.steps),
                                           "prompt/experiences_dropped": 2.0 * len(batch.steps)}

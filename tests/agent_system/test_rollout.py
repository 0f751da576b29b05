"""TrajectoryCollector with scripted generators: generation only for active environments, messages with and
without experiences, records and metrics checked against the trajectories, dynamic sampling."""

from __future__ import annotations

import numpy as np
import pytest

from agent_system.environments import make_envs
from agent_system.multi_turn_rollout.protocols import (
    SamplingParams,
    StepExperience,
    RolloutBatch,
    StepRecord,
    TrajectoryRecord,
    active_mask,
)
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.testing.configs import run_config
from agent_system.testing.policies import CountingGenerator, ExpertGenerator, GarbageGenerator, RandomGenerator, tagged


def sokoban(n=4, b=4, **env):
    return make_envs(run_config("sokoban", n=n, train_b=b, **env))[0]


def test_expert_solves_sokoban_and_finished_envs_get_no_generation():
    envs = sokoban(n=4, b=8)
    gen = ExpertGenerator(envs)
    batch = TrajectoryCollector().collect(envs, gen, SamplingParams())
    assert batch.metrics["success_rate"] == 1.0 and batch.metrics["valid_action_ratio"] == 1.0
    lengths = np.array([t.length for t in batch.trajectories])
    # one conversation per step of an active environment, one call per step of the longest episode
    assert gen.conversations == len(batch.steps) == lengths.sum()
    assert gen.calls == lengths.max()
    assert gen.batch_sizes == [int((lengths > t).sum()) for t in range(lengths.max())]
    assert np.array_equal(active_mask(batch).sum(axis=1), gen.batch_sizes)


def test_records_are_consistent_with_their_trajectories():
    envs = sokoban(n=2, b=3)
    batch = TrajectoryCollector().collect(envs, RandomGenerator(envs, seed=1), SamplingParams(), seeds=[10, 11, 12])
    assert len(batch.trajectories) == 6
    for t in batch.trajectories:
        assert [s.step for s in t.steps] == list(range(t.length))
        assert all(s.uid == t.uid and s.traj_uid == t.traj_uid for s in t.steps)
        assert sum(s.reward for s in t.steps) == pytest.approx(t.episode_reward)
        assert [s.done for s in t.steps] == [False] * (t.length - 1) + [True]
        assert t.success == (t.steps[-1].reward > 5)  # only a solved room pays +10
        assert int(t.uid.rsplit("seed", 1)[1]) in (10, 11, 12)
        for s in t.steps:
            assert s.response_ids == list(s.response_text.encode()) and len(s.logprobs) == len(s.response_ids)
            assert s.anchor_obs in s.messages[-1]["content"] and "Push" not in s.anchor_obs
            assert s.admissible_actions == ("up", "down", "left", "right")  # the state's list, from the manager
    assert [t.uid for t in batch.trajectories][::2] == [t.uid for t in batch.trajectories][1::2]
    assert batch.steps == [s for t in batch.trajectories for s in t.steps]
    # metrics against a direct computation
    succ = [t.success for t in batch.trajectories]
    assert batch.metrics["success_rate"] == pytest.approx(np.mean(succ))
    assert batch.metrics["episode_length/mean"] == pytest.approx(np.mean([t.length for t in batch.trajectories]))
    assert batch.metrics["num_steps"] == len(batch.steps)


def test_each_step_records_the_observation_it_led_to_and_none_after_the_environment_ended_the_episode():
    """Sokoban: a solved room is terminal (None); the step limit cuts the others and keeps their last observation."""
    envs = sokoban(n=2, b=6, max_steps=5)
    batch = TrajectoryCollector().collect(envs, RandomGenerator(envs, seed=3), SamplingParams(), seeds=range(20, 26))
    assert {t.success for t in batch.trajectories} == {False}  # 5 random moves solve none of these rooms
    final = envs.active_observations().anchor  # where the step limit left each environment
    assert [t.steps[-1].next_anchor_obs for t in batch.trajectories] == final
    solved = TrajectoryCollector().collect(envs, ExpertGenerator(envs), SamplingParams(), seeds=range(20, 26))
    assert {t.success for t in solved.trajectories} == {True}
    for t in batch.trajectories + solved.trajectories:
        for step, following in zip(t.steps, t.steps[1:]):
            assert step.next_anchor_obs == following.anchor_obs
        assert (t.steps[-1].next_anchor_obs is None) == t.success


def test_garbage_policy_is_all_invalid_and_never_crashes():
    envs = make_envs(run_config("gym_cards/Points24-v0", n=2, train_b=4))[0]
    gen = GarbageGenerator(seed=3)
    batch = TrajectoryCollector().collect(envs, gen, SamplingParams())
    assert batch.metrics["valid_action_ratio"] == 0.0
    assert batch.metrics["success_rate"] == 0.0
    assert all(not s.is_action_valid and s.action == "" for s in batch.steps)


class TaggingProvider:
    """Experience text on even steps only; cluster = length of the anchor (a deterministic stand-in)."""

    def __init__(self):
        self.queries = []
        self.shown_steps: list[tuple[StepQuery, StepExperience]] = []

    def provide(self, queries):
        self.queries.extend(queries)
        return [StepExperience(text=f"tip for step {q.step}" if q.step % 2 == 0 else "", cluster_id=len(q.anchor_obs), entry_ids=(f"e{q.step}",)) for q in queries]

    def shown(self, queries, experiences):
        self.shown_steps.extend(zip(queries, experiences))


class Recorder:
    def __init__(self):
        self.seen = []

    def observe(self, records):
        self.seen.extend(records)


def test_messages_experiences_clusters_and_observer():
    envs = sokoban(n=2, b=2)
    provider, observer = TaggingProvider(), Recorder()
    batch = TrajectoryCollector().collect(envs, RandomGenerator(envs), SamplingParams(), experience_provider=provider, step_observer=observer)
    assert len(provider.queries) == len(batch.steps)
    assert sorted(id(s) for s in observer.seen) == sorted(id(s) for s in batch.steps)
    for s in batch.steps:
        user = {"role": "user", "content": s.messages[-1]["content"]}
        assert s.plain_messages == [user]
        if s.step % 2 == 0:
            assert s.messages[0] == {"role": "system", "content": f"tip for step {s.step}"} and len(s.messages) == 2
        else:
            assert s.messages == s.plain_messages
        assert s.cluster_id == len(s.anchor_obs) and s.experience_ids == (f"e{s.step}",)
    q = provider.queries[0]
    assert q.step == 0 and q.task.startswith("Push") and q.task_type is None


def test_image_mode_puts_the_image_into_the_user_message():
    envs = make_envs(run_config("gym_cards/Blackjack-v0", n=2, train_b=1, gym_cards={"mode": "rgb_array"}))[0]
    batch = TrajectoryCollector().collect(envs, ExpertGenerator(envs), SamplingParams())
    content = batch.steps[0].messages[-1]["content"]
    assert content[0]["type"] == "image" and content[0]["image"].shape == (300, 300, 3)
    assert content[1]["type"] == "text" and "hit" in content[1]["text"]
    assert "image" not in batch.steps[0].info


class EvenSeedsSplit(CountingGenerator):
    """Expert everywhere, except copy 0 of tasks with an even seed answers garbage: only those groups have
    unequal episode rewards."""

    def __init__(self, envs):
        super().__init__()
        self.envs = envs
        self.expert = ExpertGenerator(envs)

    def respond(self, messages):
        idx = np.flatnonzero(self.envs.active)
        expert = self.expert.respond(messages)
        return [
            "no tags" if self.envs.traj_uids[i].endswith("copy0") and int(self.envs.uids[i].rsplit("seed", 1)[1]) % 2 == 0 else e
            for i, e in zip(idx, expert)
        ]


def test_dynamic_sampling_keeps_informative_groups_and_resamples():
    envs = sokoban(n=3, b=4)
    seeds_seen = []
    original = envs.next_task_seeds

    def recording():
        s = original()
        seeds_seen.append(s)
        return s

    envs.next_task_seeds = recording
    batch = TrajectoryCollector(dynamic_sampling=True, max_num_gen_batches=6).collect(envs, EvenSeedsSplit(envs), SamplingParams())
    rounds = int(batch.metrics["dynamic_sampling/num_gen_batches"])
    assert rounds == len(seeds_seen)
    even = sum(int((s % 2 == 0).sum()) for s in seeds_seen)
    assert batch.metrics["dynamic_sampling/informative_groups"] == even
    assert len(batch.trajectories) == 12  # always B groups of G
    groups = {}
    for t in batch.trajectories:
        groups.setdefault(t.uid, []).append(t.episode_reward)
    assert len(groups) == 4
    informative = [np.ptp(r) > 0 for r in groups.values()]
    expected = min(even, 4)
    assert informative == [True] * expected + [False] * (4 - expected)  # informative groups first
    assert even >= 4  # this seed finds B informative groups within the 6 rounds allowed
    assert sum(int((s % 2 == 0).sum()) for s in seeds_seen[:-1]) < 4  # stopped as soon as B were found


def test_dynamic_sampling_fills_up_when_too_few_groups_are_informative():
    envs = sokoban(n=2, b=3)
    batch = TrajectoryCollector(dynamic_sampling=True, max_num_gen_batches=2).collect(envs, ExpertGenerator(envs), SamplingParams())
    assert batch.metrics["dynamic_sampling/num_gen_batches"] == 2  # an expert gives equal rewards in every group
    assert batch.metrics["dynamic_sampling/informative_groups"] == 0
    assert batch.metrics["dynamic_sampling/filled_groups"] == 3 and len(batch.trajectories) == 6
    assert batch.metrics["dynamic_sampling/success_rate_all"] == 1.0


def test_generator_returning_the_wrong_count_is_an_error():
    class Short(CountingGenerator):
        def respond(self, messages):
            return [tagged("up")] * (len(messages) - 1)

    envs = sokoban(n=2, b=1)
    with pytest.raises(ValueError, match="generator returned 1 outputs for 2"):
        TrajectoryCollector().collect(envs, Short(), SamplingParams())


def test_collector_from_verl_filter_groups_config():
    from omegaconf import OmegaConf

    on = TrajectoryCollector.from_config(OmegaConf.create({"algorithm": {"filter_groups": {"enable": True, "max_num_gen_batches": 3}}}))
    assert on.dynamic_sampling and on.max_num_gen_batches == 3
    off = TrajectoryCollector.from_config({"algorithm": {}})
    assert not off.dynamic_sampling
    with pytest.raises(ValueError, match="max_num_gen_batches"):
        TrajectoryCollector(max_num_gen_batches=-1)


def _trajectory(uid: str, infos: list[dict]) -> TrajectoryRecord:
    steps = [
        StepRecord(uid=uid, traj_uid=f"{uid}-0", step=k, anchor_obs="o", messages=[], plain_messages=[], response_text="",
                   action="a", prompt_ids=[], response_ids=[], logprobs=[], reward=0.0, is_action_valid=True,
                   done=k == len(infos) - 1, info=info)
        for k, info in enumerate(infos)
    ]
    return TrajectoryRecord(uid=uid, traj_uid=f"{uid}-0", task="t", task_type=None, steps=steps, episode_reward=0.0, success=False, length=len(steps))


def test_task_score_metric_is_the_final_steps_score():
    from agent_system.multi_turn_rollout.rollout_loop import rollout_metrics

    trajs = [
        _trajectory("a", [{"task_score": 0.0}, {"task_score": 0.8}]),  # the last step's score counts
        _trajectory("b", [{"task_score": 0.5}]),
        _trajectory("c", []),  # failed at reset: no steps, scores 0
    ]
    metrics = rollout_metrics(RolloutBatch(steps=[s for t in trajs for s in t.steps], trajectories=trajs))
    assert metrics["task_score/mean"] == pytest.approx((0.8 + 0.5 + 0.0) / 3)
    no_scores = [_trajectory("d", [{"won": False}])]
    assert "task_score/mean" not in rollout_metrics(RolloutBatch(steps=no_scores[0].steps, trajectories=no_scores))


def numberline_expert(anchor: str) -> str:
    """NumberLine's expert worked out from the observation: "+" below the target, "-" above it."""
    target, current = (int(line.split(":")[1]) for line in anchor.splitlines())
    return "+" if current < target else "-"


class CountingCalls:
    """Wraps a pool's ``call``: records the environments each call asked."""

    def __init__(self, pool):
        self.pool, self.asked = pool, []

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def call(self, method, indices):
        self.asked.append((method, list(indices)))
        return self.pool.call(method, indices)


@pytest.mark.parametrize("policy", ["random", "expert"])
def test_every_step_records_the_expert_action_of_the_state_it_acted_on(policy):
    envs = make_envs(run_config("gym_cards/NumberLine-v0", n=2, train_b=3, gym_cards={"target_max": 4}))[0]
    envs.pool = counting = CountingCalls(envs.pool)
    generator = RandomGenerator(envs, seed=2) if policy == "random" else ExpertGenerator(envs)
    batch = TrajectoryCollector().collect(envs, generator, SamplingParams(), seeds=[1, 2, 3])
    assert batch.steps and all(s.expert_action == numberline_expert(s.anchor_obs) for s in batch.steps)
    # one question per active environment and state, also when the expert policy asks for the same state again
    asked = [i for method, indices in counting.asked if method == "expert_action" for i in indices]
    assert len(asked) == len(batch.steps)
    if policy == "expert":
        assert all(s.action == s.expert_action for s in batch.steps) and batch.metrics["success_rate"] == 1.0


def test_a_finished_environment_has_no_expert_action():
    envs = make_envs(run_config("gym_cards/NumberLine-v0", n=1, train_b=2, gym_cards={"target_max": 4}))[0]
    obs, _ = envs.reset([1, 2])
    assert envs.expert_actions([0, 1]) == [numberline_expert(a) for a in obs.anchor]
    while envs.active.any():
        envs.step([None if a is None else tagged(a) for a in envs.expert_actions([0, 1])])
    assert envs.expert_actions([0, 1]) == [None, None]  # the environments would still answer, but are done


def test_an_environment_that_does_not_record_its_expert_leaves_the_steps_without_one():
    from agent_system.environments.env_package.gym_cards.manager import GymCardsEnvironmentManager
    from agent_system.environments.env_package.alfworld.manager import AlfworldEnvironmentManager
    from agent_system.environments.config import env_config_from_mapping

    class Unrecorded(GymCardsEnvironmentManager):
        records_expert_actions = False

    cfg = env_config_from_mapping({"env_name": "gym_cards/NumberLine-v0", "rollout": {"n": 2},
                                   "gym_cards": {"target_max": 4}})
    envs = Unrecorded(cfg, num_tasks=2, split="train")
    batch = TrajectoryCollector().collect(envs, ExpertGenerator(envs), SamplingParams(), seeds=[1, 2])
    assert batch.metrics["success_rate"] == 1.0  # the expert still plays when asked
    assert batch.steps and all(s.expert_action is None for s in batch.steps)
    assert not AlfworldEnvironmentManager.records_expert_actions  # its planner is too slow to ask every step


def test_each_step_records_the_hidden_state_it_acted_in_and_the_one_it_led_to():
    """A manager whose observation leaves something out (here a stand-in: a name derived from the observation): each
    step carries the hidden state of its own state and of the next, which is the next step's own."""
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.gym_cards.manager import GymCardsEnvironmentManager

    class Hidden(GymCardsEnvironmentManager):
        def hidden_state(self, obs, info):
            return f"behind {obs.splitlines()[-1]!r}"

    cfg = env_config_from_mapping({"env_name": "gym_cards/NumberLine-v0", "rollout": {"n": 2}, "max_steps": 4,
                                   "gym_cards": {"target_max": 4}})
    envs = Hidden(cfg, num_tasks=2, split="train")
    batch = TrajectoryCollector().collect(envs, RandomGenerator(envs, seed=5), SamplingParams(), seeds=[1, 2])
    for t in batch.trajectories:
        for step in t.steps:
            assert step.hidden_state == f"behind {step.anchor_obs.splitlines()[-1]!r}"
        for step, following in zip(t.steps, t.steps[1:]):
            assert step.next_hidden_state == following.hidden_state

"""Environment managers reused across the verl agent loop's episodes (recipe/forge/engines/verl/manager_pool.py).

Real managers throughout: Sokoban and Gym Cards in-process, FaultyEnv in worker processes (agent_system/testing),
driven through EpisodeSession exactly as ForgeAgentLoop drives them. The reference for "same results" is a pool
that keeps nothing (max_idle=0), i.e. a fresh manager per episode, the behaviour before the pool.
"""

from __future__ import annotations

import asyncio

import pytest

from agent_system.environments.env_package.sokoban.manager import SokobanEnvironmentManager
from agent_system.testing.configs import env_config
from agent_system.testing.faulty_env import FaultyEnvironmentManager
from recipe.forge.engines.verl import episode as episode_module
from recipe.forge.engines.verl.episode import EpisodeSession
from recipe.forge.engines.verl.manager_pool import IDLE_ENV_VAR, ManagerPool, max_idle_from_env, process_manager_pool

MOVES = ["up", "left", "down", "right", "right", "up", "down"]


def answer(action: str) -> str:
    return f"<think>try it</think><action>{action}</action>"


class Tracked:
    """Mixin: records every instance built and every close, and misbehaves on request (in the caller's process):
    "boom" raises from step, "slow S" sleeps S seconds before stepping."""

    built: list = []
    closed: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).built.append(self)

    def step(self, text_actions):
        if text_actions[0] == "boom":
            raise RuntimeError("step exploded")
        if text_actions[0].startswith("slow "):
            import time

            time.sleep(float(text_actions[0].split()[1]))
        return super().step(text_actions)

    def close(self):
        type(self).closed.append(self)
        super().close()


class TrackedSokoban(Tracked, SokobanEnvironmentManager):
    built, closed = [], []


class TrackedFaulty(Tracked, FaultyEnvironmentManager):
    built, closed = [], []


@pytest.fixture
def use_manager(monkeypatch):
    """Make EpisodeSession build ``cls`` for every env name; returns cls with fresh records."""

    def install(cls):
        cls.built, cls.closed = [], []
        monkeypatch.setattr(episode_module, "get_env_manager_class", lambda name: cls)
        return cls

    return install


def sokoban_cfg():
    return env_config("sokoban", n=8, max_steps=5)


def faulty_cfg(**resources):
    return env_config("sokoban", n=8, max_steps=4, resources_per_worker={"num_workers": 1, "step_timeout_s": 20.0, **resources})


async def play(cfg, seed: int, pool: ManagerPool | None, actions=MOVES, split="train") -> list[tuple]:
    """One episode as the agent loop runs it; returns its transcript ((prompt, anchor, admissible actions) at reset,
    then (prompt, anchor, reward, done, won, valid, failure) per step)."""
    session = EpisodeSession(cfg, split, seed, pool=pool)
    transcript = []
    try:
        view = await session.reset()
        transcript.append((view.prompt, view.anchor_obs, view.admissible_actions))
        for action in actions:
            if session.done:
                break
            outcome, view = await session.step(answer(action) if not action.startswith(("boom", "slow")) else action)
            transcript.append((view.prompt, view.anchor_obs, outcome.reward, outcome.done, outcome.won,
                               outcome.is_action_valid, outcome.failure_reason))
    finally:
        await session.close()
    return transcript


def run_sequential(cfg, seeds, pool, **kw):
    async def main():
        return [await play(cfg, s, pool, **kw) for s in seeds]

    return asyncio.run(main())


@pytest.mark.parametrize("cfg, actions", [(sokoban_cfg(), ("up", "down", "left", "right")),
                                         (env_config("gym_cards/NumberLine-v0", n=8, max_steps=6), ("+", "-"))],
                         ids=["sokoban", "numberline"])
def test_sequential_episodes_share_one_manager_and_match_fresh_managers(cfg, actions):
    seeds = [5, 11, 5, 42]
    pooled, fresh = ManagerPool(max_idle=4), ManagerPool(max_idle=0)
    got = run_sequential(cfg, seeds, pooled)
    want = run_sequential(cfg, seeds, fresh)
    assert got == want
    assert all(episode[0][2] == actions for episode in got)  # the view lists the state's admissible actions
    assert got[0] == got[2] and got[0] != got[1]  # the seed, not the manager's history, decides the episode
    assert (pooled.built, pooled.reused, len(pooled)) == (1, 3, 1)
    assert (fresh.built, fresh.reused, len(fresh)) == (4, 0, 0)
    pooled.close()
    assert len(pooled) == 0


def test_concurrent_episodes_each_get_their_own_manager(use_manager):
    cls = use_manager(TrackedSokoban)
    pool = ManagerPool(max_idle=8)
    cfg = sokoban_cfg()

    async def main():
        first = await asyncio.gather(*(play(cfg, s, pool, actions=["slow 0.2", *MOVES]) for s in (1, 2, 3)))
        second = await asyncio.gather(*(play(cfg, s, pool) for s in (1, 2, 3)))
        return first, second

    asyncio.run(main())
    assert len(cls.built) == 3 and len({id(m) for m in cls.built}) == 3  # 3 at once: 3 managers, none shared
    assert len(pool) == 3 and not cls.closed  # the second wave reused all three
    pool.close()
    assert sorted(map(id, cls.closed)) == sorted(map(id, cls.built))


def test_idle_managers_beyond_the_bound_are_closed(use_manager):
    cls = use_manager(TrackedSokoban)
    pool = ManagerPool(max_idle=1)

    async def main():
        await asyncio.gather(*(play(sokoban_cfg(), s, pool, actions=["slow 0.1"]) for s in (1, 2, 3)))

    asyncio.run(main())
    assert len(cls.built) == 3 and len(pool) == 1 and len(cls.closed) == 2
    kept = next(m for m in cls.built if m not in cls.closed)
    assert run_sequential(sokoban_cfg(), [9], pool) and len(cls.built) == 3 and kept not in cls.closed


def test_keys_separate_splits_and_configs(use_manager):
    cls = use_manager(TrackedSokoban)
    pool = ManagerPool(max_idle=8)
    run_sequential(sokoban_cfg(), [1], pool)
    run_sequential(sokoban_cfg(), [1], pool, split="val")
    run_sequential(env_config("sokoban", n=8, max_steps=3), [1], pool)
    run_sequential(sokoban_cfg(), [2], pool, split="val")
    assert len(cls.built) == 3 and pool.reused == 1
    assert {m.split for m in cls.built} == {"train", "val"}


def test_a_manager_whose_step_raised_is_closed_and_not_reused(use_manager):
    cls = use_manager(TrackedSokoban)
    pool = ManagerPool(max_idle=8)
    with pytest.raises(RuntimeError, match="step exploded"):
        run_sequential(sokoban_cfg(), [1], pool, actions=["up", "boom"])
    assert len(cls.built) == 1 and cls.closed == cls.built and len(pool) == 0 and pool.retired == 1
    run_sequential(sokoban_cfg(), [1], pool)
    assert len(cls.built) == 2 and len(pool) == 1


def test_a_manager_cancelled_mid_step_is_retired_once_the_step_returns(use_manager):
    cls = use_manager(TrackedSokoban)
    pool = ManagerPool(max_idle=8)

    async def main():
        task = asyncio.create_task(play(sokoban_cfg(), 1, pool, actions=["slow 0.5"]))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(pool) == 0 and not cls.closed  # the step still runs in its thread: nobody may take the manager
        for _ in range(100):
            if cls.closed:
                break
            await asyncio.sleep(0.02)

    asyncio.run(main())
    assert cls.closed == cls.built and len(pool) == 0 and pool.retired == 1


def test_process_backed_managers_keep_their_worker_and_retire_it_after_a_crash(use_manager):
    cls = use_manager(TrackedFaulty)
    pool = ManagerPool(max_idle=8)
    cfg = faulty_cfg()
    count = ["count", "count", "count", "count"]
    first = run_sequential(cfg, [3, 4], pool, actions=count)
    [worker_pid] = cls.built[0].pool.worker_pids()
    assert len(cls.built) == 1 and worker_pid is not None  # the worker runs
    assert first[0][-1][2:5] == (1.0, True, True)  # FaultyEnv: won after 3 steps

    crashed = run_sequential(cfg, [3], pool, actions=["count", "crash", "count"])[0]
    assert crashed[-1][-1].startswith("worker crashed")  # failure_reason of the last step
    assert cls.closed == cls.built and len(pool) == 0 and pool.retired == 1

    again = run_sequential(cfg, [3, 4], pool, actions=count)
    assert again == first  # a new manager, a new worker, the same episodes
    [new_pid] = cls.built[1].pool.worker_pids()
    assert len(cls.built) == 2 and new_pid not in (None, worker_pid)
    pool.close()
    assert cls.built[1].pool.worker_pids() == [None]


def test_process_backed_results_equal_fresh_managers(use_manager):
    use_manager(TrackedFaulty)
    cfg = faulty_cfg()
    count, failing = ["count"] * 4, ["count", "raise", "count"]  # "raise": FaultyEnv raises inside the worker
    plan = [(6, count), (7, failing), (6, count), (8, count)]

    def transcripts(pool):
        async def main():
            return [await play(cfg, seed, pool, actions=actions) for seed, actions in plan]

        return asyncio.run(main())

    pooled, fresh = ManagerPool(max_idle=4), ManagerPool(max_idle=0)
    got, want = transcripts(pooled), transcripts(fresh)
    assert got == want and got[1][-1][-1] == "env error: RuntimeError: asked to raise" and got[0] == got[2]
    assert (pooled.built, pooled.reused, pooled.retired) == (2, 2, 1)  # the failed episode's manager was replaced
    pooled.close()


def test_release_checks_the_lender_and_the_bound_is_read_from_the_environment(monkeypatch):
    pool = ManagerPool(max_idle=2)
    with pytest.raises(ValueError, match="was not lent by this pool"):
        pool.release(object(), reusable=True)
    with pytest.raises(ValueError, match="max_idle=-1"):
        ManagerPool(max_idle=-1)
    monkeypatch.setenv(IDLE_ENV_VAR, "lots")
    with pytest.raises(ValueError, match=f"{IDLE_ENV_VAR}='lots' must be an integer"):
        max_idle_from_env()
    monkeypatch.setenv(IDLE_ENV_VAR, "5")
    assert max_idle_from_env() == 5


def test_sessions_without_a_pool_share_the_process_pool():
    shared = process_manager_pool()
    assert shared is process_manager_pool()
    reused = shared.reused
    first, second = run_sequential(sokoban_cfg(), [4, 4], pool=None)
    assert first == second and shared.reused == reused + 1


def test_the_episode_view_carries_the_expert_action_of_its_state_until_the_episode_ends():
    cfg = env_config("gym_cards/NumberLine-v0", n=8, max_steps=6, gym_cards={"target_max": 4})

    async def episode(seed):
        session = EpisodeSession(cfg, "train", seed, pool=ManagerPool(max_idle=0))
        views = [await session.reset()]
        try:
            while not session.done:
                _, view = await session.step(answer(views[-1].expert_action))
                views.append(view)
        finally:
            await session.close()
        return views

    for seed in (1, 2, 3):
        views = asyncio.run(episode(seed))
        for view in views[:-1]:
            target, current = (int(line.split(":")[1]) for line in view.anchor_obs.splitlines())
            assert view.expert_action == ("+" if current < target else "-")
        assert views[-1].expert_action is None  # the episode is over: no state to act on


def test_an_episode_session_reports_the_observation_each_step_led_to():
    """As the embedded engine's records (tests/agent_system/test_rollout.py): the next view's observation after a
    step the episode goes on from or the step limit cut; None after the step the environment ended the episode with."""
    async def episode(actions):
        session = EpisodeSession(env_config("gym_cards/NumberLine-v0", n=1, max_steps=3), "train", 7,
                                 pool=ManagerPool(max_idle=0))
        pairs = []
        try:
            await session.reset()
            for action in actions:
                if session.done:
                    break
                outcome, view = await session.step(answer(action))
                pairs.append((outcome.next_anchor_obs, view.anchor_obs, outcome.won))
        finally:
            await session.close()
        return pairs

    wandering = asyncio.run(episode(["?", "?", "?"]))  # invalid answers: the state stays, the limit cuts the third
    assert [n == v and not won for n, v, won in wandering] == [True] * 3 and len(wandering) == 3
    for side in ("+", "-"):
        walk = asyncio.run(episode([side] * 3))
        if walk[-1][2]:  # the target reached: the environment ended the episode
            assert walk[-1][0] is None and all(n == v for n, v, _ in walk[:-1])
            return
    raise AssertionError("neither direction reached the target of NumberLine seed 7 within 3 steps")


def test_an_episode_session_reports_the_hidden_state_of_each_view_and_of_where_each_step_led(use_manager):
    """As the embedded engine's records: the view's hidden state is its state's (the manager's hidden_state), and a
    step's outcome carries the next view's."""
    from agent_system.environments.env_package.gym_cards.manager import GymCardsEnvironmentManager

    class Hidden(GymCardsEnvironmentManager):
        def hidden_state(self, obs, info):
            return f"behind {obs.splitlines()[-1]!r}"

    use_manager(Hidden)

    async def episode(actions):
        session = EpisodeSession(env_config("gym_cards/NumberLine-v0", n=1, max_steps=3), "train", 7,
                                 pool=ManagerPool(max_idle=0))
        views, outcomes = [], []
        try:
            views.append(await session.reset())
            for action in actions:
                if session.done:
                    break
                outcome, view = await session.step(answer(action))
                outcomes.append(outcome)
                views.append(view)
        finally:
            await session.close()
        return views, outcomes

    views, outcomes = asyncio.run(episode(["?", "+", "?"]))
    assert all(v.hidden_state == f"behind {v.anchor_obs.splitlines()[-1]!r}" for v in views)
    assert [o.next_hidden_state for o in outcomes] == [v.hidden_state for v in views[1:]]

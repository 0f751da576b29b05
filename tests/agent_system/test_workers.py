"""Worker pools: a crashing, hanging or raising environment ends only its own episodes (failed, with the
reason), its worker is restarted, and the rest of the batch carries on."""

from __future__ import annotations

import pytest

from agent_system.environments.episode import EnvSpec
from agent_system.multi_turn_rollout.protocols import SamplingParams
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.testing.configs import env_config
from agent_system.testing.faulty_env import FaultyEnvironmentManager, SlowToLoad
from agent_system.testing.policies import CountingGenerator
from agent_system.workers import InProcessEnvPool, ProcessEnvPool

SPEC = EnvSpec("agent_system.testing.faulty_env:FaultyEnv", {"win_after": 3})


@pytest.mark.timeout(60)
def test_process_pool_survives_crash_hang_and_raise():
    pool = ProcessEnvPool(SPEC, num_envs=6, num_workers=3, step_timeout_s=2.0)  # workers hold envs {0,1} {2,3} {4,5}
    try:
        assert [r.obs for r in pool.reset(range(6), range(6))] == [f"seed={s} count=0" for s in range(6)]
        pids = pool.call("_info", [0, 2, 4])
        res = pool.step(list(range(6)), ["go", "go", "crash", "go", "hang", "raise"])
        assert [r.obs for r in res[:2]] == ["seed=0 count=1", "seed=1 count=1"]
        assert res[2].info["failure_reason"].startswith("worker crashed (exit code 3)") and res[2].terminated
        assert res[3].info["failure_reason"].startswith("worker crashed")  # same worker as env 2
        assert res[4].info["failure_reason"].startswith("step timeout") and res[5].info["failure_reason"].startswith("step timeout")
        assert pool.restarts == 2
        # lost episodes stay failed until reset; the survivors keep going
        res = pool.step(list(range(6)), ["go"] * 6)
        assert [r.obs for r in res[:2]] == ["seed=0 count=2", "seed=1 count=2"]
        assert all(r.info.get("failure_reason") for r in res[2:])
        res = pool.reset(range(6), [10, 11, 12, 13, 14, 15])
        assert [r.obs for r in res] == [f"seed={s} count=0" for s in range(10, 16)]
        new_pids = pool.call("_info", [0, 2, 4])
        assert new_pids[0]["pid"] == pids[0]["pid"] and new_pids[1]["pid"] != pids[1]["pid"] and new_pids[2]["pid"] != pids[2]["pid"]
        res = pool.step([5], ["raise"])
        assert res[0].info["failure_reason"] == "env error: RuntimeError: asked to raise"
        assert pool.restarts == 2  # an environment exception does not cost the worker
    finally:
        pool.close()


@pytest.mark.timeout(60)
def test_an_unpicklable_info_fails_only_its_episode_and_keeps_the_worker():
    pool = ProcessEnvPool(SPEC, num_envs=4, num_workers=2, step_timeout_s=10.0)  # workers hold {0,1} {2,3}
    try:
        pool.reset(range(4), range(4))
        res = pool.step(list(range(4)), ["go", "unpicklable", "go", "go"])
        assert [r.obs for r in (res[0], res[2], res[3])] == ["seed=0 count=1", "seed=2 count=1", "seed=3 count=1"]
        assert res[1].terminated and "cannot be sent between processes" in res[1].info["failure_reason"]
        assert pool.restarts == 0  # before: the worker died, and env 0 (same worker) failed with it
        assert pool.step([0], ["go"])[0].obs == "seed=0 count=2"
    finally:
        pool.close()


def test_in_process_pool_turns_exceptions_into_failed_episodes():
    pool = InProcessEnvPool(SPEC, num_envs=2)
    pool.reset([0, 1], [0, 1])
    res = pool.step([0, 1], ["raise", "go"])
    assert res[0].info["failure_reason"].startswith("env error: RuntimeError") and res[0].terminated
    assert res[1].obs == "seed=1 count=1" and res[1].info.get("failure_reason") is None


class FaultScript(CountingGenerator):
    """Env 1 crashes at its second step, env 2 hangs at its first; the others answer normally."""

    def __init__(self, envs):
        super().__init__()
        self.envs = envs

    def respond(self, messages):
        import numpy as np

        out = []
        for i in np.flatnonzero(self.envs.active):
            if i == 1 and self.envs.step_count[i] == 1:
                out.append("<action>crash</action>")
            elif i == 2:
                out.append("<action>hang</action>")
            else:
                out.append("<action>go</action>")
        return out


@pytest.mark.timeout(90)
def test_rollout_records_failed_episodes_and_finishes_the_rest():
    cfg = env_config("sokoban", n=2, resources_per_worker={"num_workers": 4, "step_timeout_s": 2.0})
    envs = FaultyEnvironmentManager(cfg, num_tasks=2, split="train", env_name="testing/faulty")
    try:
        batch = TrajectoryCollector().collect(envs, FaultScript(envs), SamplingParams(), seeds=[4, 7])
    finally:
        envs.close()
    trajs = batch.trajectories
    assert [t.success for t in trajs] == [True, False, False, True]
    assert trajs[1].failure_reason.startswith("worker crashed") and trajs[1].length == 2
    assert trajs[2].failure_reason.startswith("step timeout") and trajs[2].length == 1
    assert trajs[0].failure_reason is None and trajs[0].length == 3 and trajs[0].episode_reward == 3.0
    assert batch.metrics["failures/total"] == 2.0
    assert batch.metrics["failures/worker crashed (exit code 3)"] == 1.0
    assert batch.metrics["failures/step timeout (> 2 s)"] == 1.0
    assert batch.metrics["success_rate/even"] == 0.5 and batch.metrics["success_rate/odd"] == 0.5
    assert trajs[1].steps[-1].info["failure_reason"] == trajs[1].failure_reason and trajs[1].steps[-1].done


@pytest.mark.timeout(60)
def test_timeout_applies_per_environment_step_not_per_batch():
    pool = ProcessEnvPool(SPEC, num_envs=3, num_workers=1, step_timeout_s=1.5)
    try:
        pool.reset([0, 1, 2], [0, 1, 2])
        res = pool.step([0, 1, 2], ["sleep 0.7"] * 3)  # 2.1 s for the worker's share, 0.7 s per step
        assert [r.obs for r in res] == ["seed=0 count=1", "seed=1 count=1", "seed=2 count=1"]
        assert pool.restarts == 0
    finally:
        pool.close()


class AlwaysGo(CountingGenerator):
    def respond(self, messages):
        return ["<action>go</action>"] * len(messages)


@pytest.mark.timeout(30)
def test_a_failing_reset_gives_an_empty_failed_trajectory():
    cfg = env_config("sokoban", n=2)
    envs = FaultyEnvironmentManager(cfg, num_tasks=2, split="train", env_name="testing/faulty", pool=InProcessEnvPool(SPEC, 4))
    gen = AlwaysGo()
    batch = TrajectoryCollector().collect(envs, gen, SamplingParams(), seeds=[-1, 6])
    assert gen.batch_sizes == [2, 2, 2]  # the failed environments are never prompted
    bad, good = batch.trajectories[:2], batch.trajectories[2:]
    assert all(t.length == 0 and not t.success and t.failure_reason.startswith("env error: ValueError: negative seed") for t in bad)
    assert all(t.success and t.length == 3 for t in good)
    assert batch.metrics["failures/env error"] == 2.0


@pytest.mark.timeout(60)
def test_a_slow_start_up_is_not_a_hung_step():
    slow = EnvSpec(SPEC.target, {"win_after": 3, "load_s": SlowToLoad(2.0)})  # each worker takes 2 s to start
    pool = ProcessEnvPool(slow, num_envs=2, num_workers=1, step_timeout_s=0.5)
    try:
        assert [r.obs for r in pool.reset([0, 1], [0, 1])] == ["seed=0 count=0", "seed=1 count=0"]
        assert pool.restarts == 0
        res = pool.step([0, 1], ["hang", "go"])  # once started, a step has its 0.5 s again
        assert res[0].info["failure_reason"] == "step timeout (> 0.5 s): worker restarted" and pool.restarts == 1
        assert [r.obs for r in pool.reset([0, 1], [5, 6])] == ["seed=5 count=0", "seed=6 count=0"]  # the new worker too
        assert pool.restarts == 1
    finally:
        pool.close()


@pytest.mark.timeout(60)
def test_a_worker_that_does_not_start_in_time_fails_its_episodes_with_the_reason():
    slow = EnvSpec(SPEC.target, {"load_s": SlowToLoad(5.0)})
    pool = ProcessEnvPool(slow, num_envs=2, num_workers=1, step_timeout_s=60.0, start_timeout_s=1.0)
    try:
        res = pool.reset([0, 1], [0, 1])
        assert [r.info["failure_reason"] for r in res] == ["worker start-up timeout (> 1 s): worker restarted"] * 2
        assert all(r.terminated for r in res) and pool.restarts == 1
    finally:
        pool.close()

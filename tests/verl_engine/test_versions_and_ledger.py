"""Versions on every step and the library's exactly-once, ordered evolution (verl's async modes): the version
metrics of a hand-worked batch, the evolution ledger, the driver evolving on each trajectory once whatever order
and how often its rows come, cluster ids from an old snapshot filed under the current library, outcome counters
of episodes shown an older library, task groups pinned to one snapshot, and the task groups verl's staleness bound
drops (counted with verl's own replay buffer on TransferQueue)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.multi_turn_rollout.protocols import StepQuery, StepRecord, TrajectoryRecord
from recipe.forge.runs.durable import CheckpointError
from recipe.forge.engines.verl.evolution_ledger import EvolutionLedger, evolution_order
from recipe.forge.engines.verl.library_channel import NO_LIBRARY, WorkerLibrary
from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record
from recipe.forge.engines.verl.versions import library_versions_of, version_metrics


def record(traj: str, step: int = 0, obs: str = "room A", policy=(None, None), library=None, cluster=None,
           reward: float = 0.0, shown=()) -> StepRecord:
    messages = [{"role": "user", "content": f"prompt {obs}"}]
    return StepRecord(uid=traj.rsplit("-", 1)[0], traj_uid=traj, step=step, anchor_obs=obs, messages=messages,
                      plain_messages=messages, response_text="<action>go</action>", action="go", prompt_ids=[],
                      response_ids=[], logprobs=[], reward=reward, is_action_valid=True, done=False,
                      cluster_id=cluster, experience_ids=tuple(shown), policy_version=policy[0],
                      policy_version_last=policy[1], library_version=library)


def trajectory(traj: str, steps: list[StepRecord], reward: float = 1.0) -> TrajectoryRecord:
    return TrajectoryRecord(uid=traj.rsplit("-", 1)[0], traj_uid=traj, task="push the box", task_type=None,
                            steps=steps, episode_reward=reward, success=reward > 0, length=len(steps))


def rows_of(trajectories: list[TrajectoryRecord]) -> list[dict]:
    return [row_from_record(step, t, StepExtras()) for t in trajectories for step in t.steps]


# ----------------------------------------------------------------------------------------- version metrics
def test_version_metrics_of_a_hand_worked_batch():
    steps = [record("u-0", policy=(3, 3), library=5), record("u-1", policy=(2, 3), library=4),
             record("v-0", policy=(1, 1), library=5), record("v-1")]  # the last one records no version
    metrics = version_metrics(steps, policy_version=3, library_version=5)
    assert metrics["forge/staleness_max"] == 2.0 and metrics["forge/staleness_mean"] == pytest.approx(1.0)
    assert {k: v for k, v in metrics.items() if "policy_lag_steps" in k} == {
        "forge/policy_lag_steps/0": 1.0, "forge/policy_lag_steps/1": 1.0, "forge/policy_lag_steps/2": 1.0}
    assert metrics["forge/resumed_steps"] == 1.0  # u-1's response spans the update from version 2 to 3
    assert metrics["forge/library_lag_max"] == 1.0
    assert metrics["forge/library_lag_steps/0"] == 2.0 and metrics["forge/library_lag_steps/1"] == 1.0
    assert library_versions_of(metrics) == [4, 5]
    assert version_metrics([record("w-0")], 3, None) == {}


# ----------------------------------------------------------------------------------------------- the ledger
VERSIONED = [trajectory(f"t{i}-{c}", [record(f"t{i}-{c}", policy=(v, v))]) for i, v in enumerate([2, 0, 1, 0])
             for c in range(2)]


@settings(max_examples=30, deadline=None)
@given(st.permutations(VERSIONED))
def test_evolution_order_is_by_oldest_policy_then_uids_whatever_the_rows_order(shuffled):
    order = [t.traj_uid for t in evolution_order(shuffled)]
    assert order == ["t1-0", "t1-1", "t3-0", "t3-1", "t2-0", "t2-1", "t0-0", "t0-1"]


def test_the_ledger_admits_each_trajectory_once_within_its_window_and_survives_a_checkpoint(tmp_path):
    ledger = EvolutionLedger.for_bound(2)  # verl's bound: groups at most 2 versions old; remembered 3 iterations
    first, repeated = ledger.admit([*VERSIONED[:4], VERSIONED[0]], iteration=0)
    assert [t.traj_uid for t in first] == ["t1-0", "t1-1", "t0-0", "t0-1"] and repeated == 1
    again, repeated = ledger.admit(VERSIONED[:6], iteration=1)
    assert [t.traj_uid for t in again] == ["t2-0", "t2-1"] and repeated == 4
    ledger.keep_marks({v: 10 * v for v in range(6)})
    assert ledger.entry_marks == {3: 30, 4: 40, 5: 50}  # the newest window of marks
    ledger.save(tmp_path)
    restored = EvolutionLedger.load(tmp_path, window=3)
    assert restored.evolved == ledger.evolved and restored.entry_marks == ledger.entry_marks
    for iteration in (2, 3):
        restored.admit([], iteration)
    assert set(restored.evolved) == {"t2-0", "t2-1"}  # iteration 0's uids left the window at iteration 3
    assert EvolutionLedger.load(tmp_path / "elsewhere", window=3) is None  # a checkpoint from before ledgers
    (tmp_path / "evolution_ledger.json").write_text(json.dumps({"format": "slea-rl-evolution-ledger"}))
    with pytest.raises(CheckpointError, match="evolution_ledger.json is damaged"):
        EvolutionLedger.load(tmp_path, window=3)


# ----------------------------------------------------------------------------------------------- the driver
@pytest.fixture
def forge_cfg(run_config_factory, tmp_path):
    return run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                               "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
                               f"algorithm.forge.checkpoint_dir={tmp_path / 'library'}"])


@pytest.fixture
def driver(forge_cfg):
    from recipe.forge.engines.verl.library_driver import LibraryDriver

    return LibraryDriver.from_trainer_config(forge_cfg)


def batch(prefix: str, library: int = 0, shown=()) -> list[TrajectoryRecord]:
    """Two tasks x two copies over three rooms, a won and a lost copy each (a learning signal for the rule
    extractor); ``shown``: entry ids every first step was shown."""
    out = []
    for task in ("a", "b"):
        for copy, reward in ((0, 1.0), (1, -0.5)):
            traj = f"{prefix}{task}-{copy}"
            steps = [record(traj, 0, f"room {task.upper()} start", (0, 0), library, shown=shown),
                     record(traj, 1, f"room {task.upper()} {'goal' if reward > 0 else 'pit'}", (0, 0), library,
                            reward=reward)]
            out.append(trajectory(traj, steps, reward))
    return out


def entry_counters(driver) -> dict:
    return {e.entry_id: (e.retrieval_count, e.shown_episodes, e.unshown_episodes)
            for e in driver.system.library.all_entries()}


def test_no_trajectory_evolves_the_library_twice_even_across_a_resume(driver, forge_cfg, tmp_path):
    first = driver.end_iteration(rows_of(batch("x")), iteration=0)
    assert first["forge/repeated_trajectories"] == 0.0 and len(driver.system.library) > 0
    shown = [str(e.entry_id) for e in driver.system.library.all_entries()][:2]
    trained = rows_of(batch("y", library=1, shown=shown))
    driver.end_iteration(trained, iteration=1)
    counted = entry_counters(driver)
    assert any(shown_episodes for _, shown_episodes, _ in counted.values())  # the y episodes were counted once
    # the same rows again (a group handed out twice): left out and counted, no entry counts them again
    again = driver.end_iteration(trained, iteration=2)
    assert again["forge/repeated_trajectories"] == 4.0 and entry_counters(driver) == counted
    # and after a resume from the checkpoint the library and its ledger were saved into
    driver.save(str(tmp_path / "forge_library"))
    from recipe.forge.engines.verl.library_driver import LibraryDriver

    resumed = LibraryDriver.from_trainer_config(forge_cfg)
    resumed.load(str(tmp_path / "forge_library"))
    after = resumed.end_iteration(trained, iteration=3)
    assert after["forge/repeated_trajectories"] == 4.0 and entry_counters(resumed) == counted


def test_evolution_does_not_depend_on_the_order_of_verls_rows(run_config_factory, tmp_path):
    from recipe.forge.engines.verl.library_driver import LibraryDriver

    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                              f"algorithm.forge.checkpoint_dir={tmp_path}"])
    rows = rows_of(batch("x")) + rows_of(batch("y"))
    states = []
    for seed in range(3):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        driver = LibraryDriver.from_trainer_config(cfg)
        driver.end_iteration(shuffled, iteration=0)
        state = driver.system.state()
        states.append((state["library"], state["index"]))
    assert states[0] == states[1] == states[2]


def test_cluster_ids_from_an_old_snapshot_are_filed_under_the_current_library(driver):
    """A worker's provider of snapshot v0 founds a provisional cluster for "room X"; meanwhile the driver files
    "room X" (and "room Y") under clusters of its own and publishes v1, whose provider founds its first provisional
    cluster, the same number, for "room Z". Rows of both snapshots in one trained batch: each observation goes to
    its own driver cluster, and a cluster id the old snapshot had is kept."""
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.system import PROVISIONAL_BASE

    system = driver.system
    room_a = system.index.assign("room A", 0)
    old = ExperienceSystem.from_snapshot(system.snapshot(with_search=True)).provider

    def query(obs: str, traj: str) -> StepQuery:
        return StepQuery(anchor_obs=obs, task="t", task_type=None, uid=traj.split("-")[0], traj_uid=traj, step=0)
    x_old, a_old = old.provide([query("room X", "s-0"), query("room A", "s-0")])
    assert x_old.cluster_id == PROVISIONAL_BASE and a_old.cluster_id == room_a and x_old.library_version == 0
    driver.end_iteration(rows_of([trajectory("p-0", [record("p-0", 0, "room X", (0, 0), 0),
                                                     record("p-0", 1, "room Y", (0, 0), 0)])]), iteration=0)
    (room_x, _), (room_y, _) = system.index.match("room X"), system.index.match("room Y")
    new = ExperienceSystem.from_snapshot(system.snapshot(with_search=True)).provider
    z_new, y_new = new.provide([query("room Z", "n-0"), query("room Y", "n-0")])
    assert z_new.cluster_id == PROVISIONAL_BASE == x_old.cluster_id and y_new.cluster_id == room_y
    stale = trajectory("s-0", [record("s-0", 0, "room X", (0, 0), 0, cluster=x_old.cluster_id),
                               record("s-0", 1, "room A", (0, 0), 0, cluster=a_old.cluster_id)])
    fresh = trajectory("n-0", [record("n-0", 0, "room Z", (1, 1), 1, cluster=z_new.cluster_id),
                               record("n-0", 1, "room Y", (1, 1), 1, cluster=y_new.cluster_id)])
    rows = rows_of([fresh, stale])
    filed = dict(zip((row["anchor_obs"] for row in rows), driver.absorb(rows)))
    assert filed["room X"] == room_x and filed["room A"] == room_a and filed["room Y"] == room_y
    assert filed["room Z"] not in (room_x, room_a, room_y) and filed["room Z"] < PROVISIONAL_BASE


def test_an_episode_shown_an_older_library_does_not_count_against_lessons_it_could_not_see(run_config_factory):
    """An entry added at version 1, linked to room C: an episode at room C generated with library version 0 (verl's
    async modes train it after the entry arrived) was not shown it because it did not exist; it counts nothing for
    the entry. The same episode generated with version 1 counts as at its cluster without being shown it."""
    from recipe.forge.experience.library import Candidate
    from recipe.forge.experience.system import ExperienceSystem
    from recipe.forge.run_config import load_run_config

    algorithm = load_run_config(run_config_factory(["algorithm.adv_estimator=forge"])).algorithm
    counts = {}
    for shown_version in (0, 1):
        system = ExperienceSystem.from_algorithm(algorithm)
        room_c = system.index.assign("room C", 0)
        system.begin_iteration(0)  # version 0 published: no entries
        [lesson] = system.library.insert_unchecked([Candidate("Lesson about room C.", "golden", "principle", 1.0,
                                                              cluster_ids=[room_c])], 0)
        system.version = 1  # as the evolution that added it leaves the library
        system.begin_iteration(1)
        episode = trajectory("u-0", [record("u-0", 0, "room C", (0, 0), shown_version, cluster=room_c)], reward=1.0)
        system.evolve([episode], 1)
        entry = system.library.entries[lesson]
        counts[shown_version] = (entry.shown_episodes, entry.unshown_episodes, entry.unshown_successes)
    assert counts == {0: (0, 0, 0), 1: (0, 1, 1)}


# ------------------------------------------------------------------------------------ the workers' pinning
class MemoryBroker:
    def __init__(self):
        self.published = (("", NO_LIBRARY, NO_LIBRARY), None)

    def publish(self, version: int, snapshot) -> None:
        self.published = (("driver", version, version), snapshot)

    async def tag(self):
        return self.published[0]

    def latest(self):
        return self.published


def test_a_task_group_keeps_the_snapshot_its_first_copy_started_with(run_config_factory):
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.run_config import load_run_config

    system = ExperienceSystem.from_algorithm(load_run_config(run_config_factory([])).algorithm)
    v0 = system.snapshot(with_search=True)
    system.version = 1
    v1 = system.snapshot(with_search=True)
    broker = MemoryBroker()
    library = WorkerLibrary(connect=lambda: broker)

    async def scenario():
        broker.publish(0, v0)
        first = await library.acquire("g")
        broker.publish(1, v1)  # a new version while the group's copies run
        second = await library.acquire("g")
        other = await library.acquire("h")
        library.release("g")
        library.release("g")
        library.release("h")
        pinned = library.pinned_groups
        later = await library.acquire("g")  # a group of that uid starting now takes the new version
        library.release("g")
        return first, second, other, pinned, later

    first, second, other, pinned, later = asyncio.run(scenario())
    assert first[0] == second[0] == 0 and first[1] is second[1]
    assert other[0] == 1 and later[0] == 1 and pinned == 0 and library.pinned_groups == 0


def test_a_failed_load_releases_the_group():
    broker = MemoryBroker()
    broker.publish(0, object())  # not a snapshot: building the provider fails
    library = WorkerLibrary(connect=lambda: broker)

    async def scenario():
        results = await asyncio.gather(library.acquire("g"), library.acquire("g"), return_exceptions=True)
        return results, library.pinned_groups

    results, pinned = asyncio.run(scenario())
    assert all(isinstance(r, Exception) for r in results) and pinned == 0


# --------------------------------------------------------------------------------- verl's staleness bound
@pytest.fixture
def transfer_queue(run_config_factory):
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    cfg = run_config_factory(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    OmegaConf.resolve(cfg)
    cfg.transfer_queue.enable = True
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"TRANSFER_QUEUE_ENABLE": "1"}})
    tq.init(cfg.transfer_queue)
    try:
        yield tq
    finally:
        tq.close()
        ray.shutdown()


def test_groups_beyond_the_staleness_bound_are_dropped_and_counted_before_training(transfer_queue):
    """verl's own async replay buffer, bound 2: at global step 4 a group dispatched at step 1 spans 4 versions and
    is dropped (its 2 episodes, 3 steps counted, its rows cleared, one prompt refilled); one dispatched at step 3
    spans 2 and is trained."""
    import inspect

    import torch
    from tensordict import TensorDict
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    from recipe.forge.engines.verl.stale_groups import StaleCountingReplayBuffer, StaleGroups, count_stale_groups

    # the verl method the counter hooks into, by name and arguments (an upgrade that moves it fails here)
    assert list(inspect.signature(ReplayBufferAsync._evict_terminal_groups).parameters) == [
        "self", "global_steps", "partition_id", "eviction_reasons"]
    tq = transfer_queue
    groups = {"stale": (1, ["stale_0_0", "stale_0_1", "stale_1_0"]), "fresh": (3, ["fresh_0_0", "fresh_1_0"])}
    for uid, (dispatched, rows) in groups.items():
        tq.kv_batch_put(keys=[uid], partition_id="train",
                        tags=[{"is_prompt": True, "status": "finished", "global_steps": dispatched}])
        tq.kv_batch_put(keys=rows, partition_id="train", fields=TensorDict({"x": torch.zeros(len(rows), 1)},
                                                                             batch_size=len(rows)),
                        tags=[{"status": "success", "global_steps": dispatched, "seq_len": 1}] * len(rows))
    refilled = []
    buffer = ReplayBufferAsync(trainer_mode="colocate_async", trainer_config={}, max_off_policy_threshold=2,
                               max_off_policy_strategy="drop", sampler_kwargs={}, poll_interval=0.05,
                               refill_fn=refilled.append)
    counter = StaleGroups()
    assert count_stale_groups(buffer, counter) and isinstance(buffer, StaleCountingReplayBuffer)
    batch, metrics = buffer.sample(global_steps=4, partition_id="train", batch_size=1)
    assert sorted(batch.keys) == ["fresh_0_0", "fresh_1_0"] and refilled == [1]
    assert metrics["training/off_policy/evicted_samples"] == 1  # verl's own figure: groups
    assert counter.metrics() == {"forge/stale_groups_dropped": 1.0, "forge/stale_episodes_dropped": 2.0,
                                 "forge/stale_steps_dropped": 3.0}
    assert counter.metrics()["forge/stale_steps_dropped"] == 0.0  # counted per iteration
    assert not any(key.startswith("stale") for key in tq.kv_list("train").get("train", {}))
    # a synchronous buffer is left alone: it drops nothing for staleness
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    sync = ReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None,
                        max_off_policy_strategy="drop", sampler_kwargs={})
    assert not count_stale_groups(sync, StaleGroups()) and type(sync) is ReplayBuffer

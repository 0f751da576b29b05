"""The agent-loop worker's library cache (recipe/forge/engines/verl/library_channel.py): a new version loads off the
event loop, once, and a replaced broker is looked up again.

The broker is an in-memory stand-in with the same two calls as BrokerClient (tag, latest); the snapshots and
the providers built from them are real ExperienceSystem ones.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import ray

from recipe.forge.engines.verl.library_channel import NO_LIBRARY, WorkerLibrary, provider_from_snapshot
from recipe.forge.experience import ExperienceSystem


class MemoryBroker:
    """tag() / latest() like BrokerClient; ``dead`` makes both raise as a killed actor's handle does."""

    def __init__(self):
        self.published = (("", NO_LIBRARY, NO_LIBRARY), None)
        self.dead = False
        self.fetches = 0

    def publish(self, version: int, snapshot) -> None:
        self.published = (("driver", version, version), snapshot)

    async def tag(self):
        if self.dead:
            raise ray.exceptions.RayActorError()
        return self.published[0]

    def latest(self):
        if self.dead:
            raise ray.exceptions.RayActorError()
        self.fetches += 1
        return self.published


class GatedBuild:
    """provider_from_snapshot that, for the ``gated`` versions, blocks until the test opens ``gate`` (a slow
    rebuild, as of a large index, whose length the test decides, not the clock); counts its calls per version."""

    def __init__(self, gated: set[int]):
        self.gated = gated
        self.gate, self.entered = threading.Event(), threading.Event()
        self.calls: dict[int, int] = {}
        self.threads: set[str] = set()

    def __call__(self, snapshot, tokenizer):
        self.calls[snapshot.version] = self.calls.get(snapshot.version, 0) + 1
        self.threads.add(threading.current_thread().name)
        if snapshot.version in self.gated:
            self.entered.set()
            assert self.gate.wait(timeout=60), "the test never opened the gate"
        return provider_from_snapshot(snapshot, tokenizer)


async def until(condition, timeout_s: float = 30.0) -> None:
    """Yield to the event loop until ``condition()`` holds (the timeout only catches a broken test)."""
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.fixture
def snapshots(cfg_forge):
    system = ExperienceSystem.from_config(cfg_forge)
    system.index.assign("You arrive at fridge 1. The fridge 1 is closed.", 0)
    first = system.snapshot(with_search=True)
    system.version += 1
    system.index.assign("You arrive at desk 1. On the desk 1, you see a pen 2.", 0)
    return first, system.snapshot(with_search=True)


@pytest.fixture
def cfg_forge():
    from recipe.forge.config_schema import ForgeConfig

    return ForgeConfig(warmup_iterations=0, min_library_size=0, library_save_freq=1000, checkpoint_dir="unused")


def test_nothing_published_gives_no_provider():
    assert asyncio.run(WorkerLibrary(connect=lambda: None).refresh()) == (NO_LIBRARY, None)


def test_a_slow_rebuild_leaves_the_event_loop_free_and_runs_once_per_version(snapshots):
    v0, v1 = snapshots
    broker, build = MemoryBroker(), GatedBuild(gated={1})
    library = WorkerLibrary(connect=lambda: broker, build=build)

    async def main():
        broker.publish(0, v0)
        version, provider = await library.refresh()
        assert version == 0 and provider.system.version == 0
        broker.publish(1, v1)
        ticks = []

        async def ticker():
            while True:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.01)

        clock = asyncio.create_task(ticker())
        waiting = [asyncio.create_task(library.refresh()) for _ in range(5)]  # five episodes start meanwhile
        await until(build.entered.is_set)
        started = time.perf_counter()
        await until(lambda: sum(t > started for t in ticks) >= 10)  # the loop runs other coroutines meanwhile...
        assert not any(t.done() for t in waiting)  # ...while they wait for the new version
        build.gate.set()
        results = await asyncio.gather(*waiting)
        clock.cancel()
        return results

    results = asyncio.run(main())
    assert {(version, provider.system.version) for version, provider in results} == {(1, 1)}
    assert len({id(provider) for _, provider in results}) == 1  # one provider for the version, shared
    assert build.calls == {0: 1, 1: 1} and broker.fetches == 2
    assert build.threads == {"forge-library_0"}  # never on the event loop's thread


def test_the_new_provider_is_used_once_ready_and_an_unchanged_tag_costs_no_fetch(snapshots):
    v0, v1 = snapshots
    broker = MemoryBroker()
    library = WorkerLibrary(connect=lambda: broker)

    async def main():
        broker.publish(0, v0)
        first = await library.refresh()
        again = await library.refresh()
        broker.publish(1, v1)
        newer = await library.refresh()
        return first, again, newer

    first, again, newer = asyncio.run(main())
    assert first[1] is again[1] and broker.fetches == 2
    assert newer[0] == 1 and newer[1] is not first[1]
    assert newer[1].system.index.match("You arrive at desk 1. On the desk 1, you see a pen 2.") is not None
    assert first[1].system.index.match("You arrive at desk 1. On the desk 1, you see a pen 2.") is None


def test_a_cancelled_waiter_leaves_the_load_for_the_next_episode(snapshots):
    v0, _ = snapshots
    broker, build = MemoryBroker(), GatedBuild(gated={0})
    library = WorkerLibrary(connect=lambda: broker, build=build)

    async def main():
        broker.publish(0, v0)
        first = asyncio.create_task(library.refresh())
        await until(build.entered.is_set)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        build.gate.set()
        return await library.refresh()

    version, provider = asyncio.run(main())
    assert version == 0 and provider is not None and build.calls == {0: 1}


def test_a_replaced_broker_is_looked_up_again(snapshots):
    v0, v1 = snapshots
    old, new = MemoryBroker(), MemoryBroker()
    brokers = [old, new]
    lookups = []

    def connect():
        lookups.append(threading.current_thread().name)
        return brokers[min(len(lookups), 2) - 1]

    library = WorkerLibrary(connect=connect)

    async def main():
        old.publish(0, v0)
        assert (await library.refresh())[0] == 0
        old.dead = True  # the driver restarted: its broker is gone, a new one holds the library
        new.publish(1, v1)
        assert (await library.refresh())[0] == 1
        new.dead = True
        with pytest.raises(ray.exceptions.RayActorError):
            await library.refresh()  # looked up once more, and still dead: the error surfaces

    asyncio.run(main())
    assert len(lookups) == 3 and set(lookups) == {"forge-library_0"}


def test_the_driver_broker_belongs_to_the_current_ray_cluster_and_holds_each_version_once(snapshots):
    """A broker handle from an earlier ray.init in the same process points into a cluster that is gone; the
    driver gets a live broker after a restart (the cross-engine test follows other Ray tests in one process).
    A published version is one object in Ray's store: the broker holds and hands out its reference, so every
    worker's fetch reads that object (the snapshot is serialised once, by ``publish``), and a worker builds its
    provider from it."""
    import ray

    from recipe.forge.engines.verl.library_channel import BrokerClient, get_or_create_broker, publish

    for _ in range(2):
        if ray.is_initialized():
            ray.shutdown()
        ray.init(num_cpus=1, include_dashboard=False)
        try:
            broker = get_or_create_broker()
            assert get_or_create_broker() is broker
            assert publish(broker, "driver", 1, 0, snapshots[1]) == ("driver", 1, 0)
            (tag, (first,)), (_, (second,)) = ray.get([broker.latest.remote(), broker.latest.remote()])
            assert tag == ("driver", 1, 0) and isinstance(first, ray.ObjectRef) and first == second
            fetched = BrokerClient(broker).latest()
            assert fetched[0] == tag and provider_from_snapshot(fetched[1]).system.version == snapshots[1].version
            assert publish(broker, "driver", -1, 1, None) == ("driver", -1, 1)
            assert BrokerClient(broker).latest() == (("driver", -1, 1), None)
        finally:
            ray.shutdown()

"""Publishing the experience library from the driver to the agent-loop workers.

The driver (the trainer, inside verl's TaskRunner) owns the library and evolves it once per iteration. It
publishes a snapshot with a version number through a named Ray actor, :class:`LibraryBroker`: :func:`publish`
puts the snapshot into Ray's object store once (``ray.put``: one serialisation per version) and hands the broker
the object's reference, which is all the broker holds and hands out. Each agent-loop worker process keeps the
provider built from the latest snapshot it has seen and checks the published tag once per episode (one small
RPC); only a new version costs a fetch, a read of that one stored object (numpy arrays in it, the bulk of the
observation search, are mapped from the store rather than copied on the same node). Every step records the
version it was generated with, so a sample can always be traced to the library that shaped its prompt.

The snapshot fetch and the provider rebuild run in a thread, never on the worker's event loop: generation and
environment steps of the other episodes go on while a new version loads. Episodes that start meanwhile wait
for that version (one load per new tag); the snapshot ships the driver's observation search, so the rebuild
does not hash every cluster prototype again.

A snapshot provider never changes the driver's library: an observation that matches no known cluster founds a
worker-local cluster (ids above the driver's range). verl runs the G sessions of one prompt in one worker, so
the copies of a task share those ids, and the advantage groups each task's steps by them (the clusters that drove
their retrieval). The driver files the steps under its own clusters afterwards, when it evolves the library
(``ExperienceSystem.absorb``).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import ray

BROKER_NAME = "slea_rl_library_broker"
NO_LIBRARY = -1


@ray.remote(num_cpus=0)
class LibraryBroker:
    """Holds the latest published tag and the reference to its snapshot in Ray's object store (never the
    snapshot itself: the broker neither deserialises nor re-serialises it)."""

    def __init__(self):
        self._tag = ("", NO_LIBRARY, NO_LIBRARY)
        self._snapshot: list = [None]

    def publish(self, publisher: str, version: int, iteration: int, snapshot: list) -> tuple[str, int, int]:
        """Publish ``snapshot``: ``[ObjectRef]`` of the stored snapshot (a list, so that Ray passes the reference
        on instead of resolving it), or ``[None]`` for no library. The tag (publishing driver, version,
        iteration) changes with every evolution and every new iteration (the warm-up gates depend on the
        iteration, not only on the library). Workers compare tags for equality only, so a driver that starts
        over (or resumes an older checkpoint) publishes normally."""
        tag = (str(publisher), int(version), int(iteration))
        self._tag, self._snapshot = tag, list(snapshot)
        return tag

    def tag(self) -> tuple[str, int, int]:
        return self._tag

    def latest(self) -> tuple[tuple[str, int, int], list]:
        """(tag, ``[ObjectRef]`` of the snapshot or ``[None]``)."""
        return self._tag, self._snapshot


def publish(broker: ray.actor.ActorHandle, publisher: str, version: int, iteration: int,
            snapshot: Any) -> tuple[str, int, int]:
    """Publish ``snapshot`` (None: no library) under the tag (publisher, version, iteration): one ``ray.put``,
    then the reference goes to the broker. Returns the tag. The stored object lives while the broker (or a
    worker still loading it) holds the reference; this driver process owns it."""
    stored = [None if snapshot is None else ray.put(snapshot)]
    return tuple(ray.get(broker.publish.remote(publisher, version, iteration, stored)))


_DRIVER_BROKERS: dict[tuple[str, str], ray.actor.ActorHandle] = {}  # (Ray node, job) -> that job's broker


def get_or_create_broker() -> ray.actor.ActorHandle:
    """The current Ray job's broker (created by the driver; idempotent). The handle is kept for the life of the
    driver process, per job: a named actor dies with the last reference to it, and a handle from an earlier
    ``ray.init`` in the same process (tests, notebooks) points into a cluster that is gone."""
    context = ray.get_runtime_context()
    job = (context.get_node_id(), context.get_job_id())  # a new local cluster restarts job ids, not node ids
    if job not in _DRIVER_BROKERS:
        _DRIVER_BROKERS[job] = LibraryBroker.options(name=BROKER_NAME, get_if_exists=True, lifetime=None).remote()
    return _DRIVER_BROKERS[job]


def find_broker() -> ray.actor.ActorHandle | None:
    try:
        return ray.get_actor(BROKER_NAME)
    except ValueError:
        return None


class BrokerClient:
    """A worker's two calls to the broker: the tag check (one small RPC, awaited on the event loop) and the
    snapshot fetch (blocking, run off the loop together with the rebuild)."""

    def __init__(self, handle: ray.actor.ActorHandle):
        self.handle = handle

    async def tag(self) -> tuple[str, int, int]:
        return tuple(await self.handle.tag.remote())

    def latest(self) -> tuple[tuple[str, int, int], Any]:
        tag, (stored,) = ray.get(self.handle.latest.remote())
        return tuple(tag), None if stored is None else ray.get(stored)


def connect_broker() -> BrokerClient | None:
    handle = find_broker()
    return None if handle is None else BrokerClient(handle)


_LOADER: ThreadPoolExecutor | None = None


def library_loader() -> ThreadPoolExecutor:
    """The process's thread for broker look-ups, snapshot fetches and provider rebuilds (one at a time)."""
    global _LOADER
    if _LOADER is None:
        _LOADER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-library")
    return _LOADER


class WorkerLibrary:
    """Per-process cache of the provider built from the latest snapshot (shared by all agent loops).

    ``connect`` finds the broker (None when nothing is published yet); ``build(snapshot, tokenizer)`` makes the
    provider. Both run in :func:`library_loader`'s thread."""

    def __init__(self, connect: Callable[[], Any] = connect_broker, build: Callable[[Any, Any], Any] | None = None):
        self.tag = ("", NO_LIBRARY, NO_LIBRARY)  # (publishing driver, library version, iteration)
        self.provider: Any = None
        self._connect = connect
        self._build = build or provider_from_snapshot
        self._lock: asyncio.Lock | None = None
        self._broker: Any = None
        self._loading: asyncio.Future | None = None  # the load in progress, kept across a cancelled waiter

    async def refresh(self, tokenizer: Any = None) -> tuple[int, Any]:
        """(version, provider) of the newest published library; (-1, None) when nothing is published.

        ``tokenizer`` caps the rendered experience text in tokens (max_experience_length)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        async with self._lock:
            for attempt in range(2):
                if self._broker is None:
                    self._broker = await loop.run_in_executor(library_loader(), self._connect)
                    if self._broker is None:
                        return NO_LIBRARY, None
                try:
                    tag = await self._broker.tag()
                    if tag != self.tag:
                        if self._loading is None:
                            self._loading = loop.run_in_executor(library_loader(), self._load, self._broker, tokenizer)
                        try:
                            # shielded: a cancelled episode leaves the load running for the next one
                            self.tag, self.provider = await asyncio.shield(self._loading)
                        finally:
                            if self._loading.done():
                                self._loading = None
                    break
                except ray.exceptions.RayActorError:
                    # the broker was replaced (a new driver): look it up again once
                    self._broker = None
                    if attempt:
                        raise
        return self.tag[1], self.provider

    def _load(self, broker: Any, tokenizer: Any) -> tuple[tuple[str, int, int], Any]:
        tag, snapshot = broker.latest()
        return tuple(tag), self._build(snapshot, tokenizer) if snapshot is not None else None


def provider_from_snapshot(snapshot: Any, tokenizer: Any = None) -> Any:
    """Rebuild the experience provider (observation index + retrieval) of a published snapshot: known clusters
    keep their ids, new observations get worker-local ids that the driver resolves with ``absorb``."""
    from recipe.forge.experience import ExperienceSystem

    return ExperienceSystem.from_snapshot(snapshot, tokenizer).provider


WORKER_LIBRARY = WorkerLibrary()


def shutdown_library_loader() -> None:
    """Stop the process's library thread, if one was started (a test session's end)."""
    global _LOADER
    if _LOADER is not None:
        _LOADER.shutdown(wait=True, cancel_futures=True)
        _LOADER = None

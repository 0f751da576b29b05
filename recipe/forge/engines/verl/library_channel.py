"""Publishing the experience library from the driver to the agent-loop workers.

The driver (the trainer, inside verl's TaskRunner) owns the library and evolves it once per iteration. It
publishes a snapshot with a version number through a named Ray actor, :class:`LibraryBroker`: :func:`publish`
puts the snapshot into Ray's object store once (``ray.put``: one serialisation per version) and hands the broker
the object's reference, which is all the broker holds and hands out. The broker has two channels, ``train`` and
``val``: training episodes take the training library, validation episodes what the validation pass publishes
(the library, or none for ``val_no_library``); in verl's async modes training episodes run during validation,
and one channel would hand them the validation pass's choice.

Each agent-loop worker process keeps, per channel, the provider built from the latest snapshot it has seen and
checks the published tag when a task group starts (one small RPC); only a new version costs a fetch, a read of
that one stored object (numpy arrays in it, the bulk of the observation search, are mapped from the store rather
than copied on the same node). A task group (verl's uid: the G copies of one task, all run in one worker) keeps
the snapshot it started with until its last copy ends (:meth:`WorkerLibrary.acquire` / ``release``), even when a
newer version is published meanwhile (verl's async modes): its steps' cluster ids, the advantage's step groups,
then all come from one snapshot's observation index. Every step records the library version it was shown (and
the policy versions that generated it), so a sample can always be traced to the library that shaped its prompt.

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
TRAIN, VALIDATION = "train", "val"  # the broker's channels
CHANNELS = (TRAIN, VALIDATION)
NO_TAG = ("", NO_LIBRARY, NO_LIBRARY)


def channel_of(split: str) -> str:
    """The channel an episode of dataset split ``split`` takes its library from."""
    return TRAIN if split == TRAIN else VALIDATION


@ray.remote(num_cpus=0)
class LibraryBroker:
    """Holds, per channel, the latest published tag and the reference to its snapshot in Ray's object store
    (never the snapshot itself: the broker neither deserialises nor re-serialises it)."""

    def __init__(self):
        self._published = {channel: (NO_TAG, [None]) for channel in CHANNELS}

    def publish(self, publisher: str, version: int, iteration: int, snapshot: list,
                channel: str = TRAIN) -> tuple[str, int, int]:
        """Publish ``snapshot`` on ``channel``: ``[ObjectRef]`` of the stored snapshot (a list, so that Ray passes
        the reference on instead of resolving it), or ``[None]`` for no library. The tag (publishing driver,
        version, iteration) changes with every evolution and every new iteration (the warm-up gates depend on the
        iteration, not only on the library). Workers compare tags for equality only, so a driver that starts
        over (or resumes an older checkpoint) publishes normally."""
        if channel not in self._published:
            raise ValueError(f"unknown library channel {channel!r}; channels: {list(CHANNELS)}")
        tag = (str(publisher), int(version), int(iteration))
        self._published[channel] = (tag, list(snapshot))
        return tag

    def tag(self, channel: str = TRAIN) -> tuple[str, int, int]:
        return self._published[channel][0]

    def latest(self, channel: str = TRAIN) -> tuple[tuple[str, int, int], list]:
        """(tag, ``[ObjectRef]`` of the snapshot or ``[None]``) of ``channel``."""
        return self._published[channel]


def publish(broker: ray.actor.ActorHandle, publisher: str, version: int, iteration: int,
            snapshot: Any, channel: str = TRAIN) -> tuple[str, int, int]:
    """Publish ``snapshot`` (None: no library) on ``channel`` under the tag (publisher, version, iteration): one
    ``ray.put``, then the reference goes to the broker. Returns the tag. The stored object lives while the broker
    (or a worker still loading it) holds the reference; this driver process owns it."""
    stored = [None if snapshot is None else ray.put(snapshot)]
    return tuple(ray.get(broker.publish.remote(publisher, version, iteration, stored, channel)))


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
    """A worker's two calls to the broker for one channel: the tag check (one small RPC, awaited on the event
    loop) and the snapshot fetch (blocking, run off the loop together with the rebuild)."""

    def __init__(self, handle: ray.actor.ActorHandle, channel: str = TRAIN):
        self.handle = handle
        self.channel = channel

    async def tag(self) -> tuple[str, int, int]:
        return tuple(await self.handle.tag.remote(self.channel))

    def latest(self) -> tuple[tuple[str, int, int], Any]:
        tag, (stored,) = ray.get(self.handle.latest.remote(self.channel))
        return tuple(tag), None if stored is None else ray.get(stored)


def connect_broker(channel: str = TRAIN) -> BrokerClient | None:
    handle = find_broker()
    return None if handle is None else BrokerClient(handle, channel)


_LOADER: ThreadPoolExecutor | None = None


def library_loader() -> ThreadPoolExecutor:
    """The process's thread for broker look-ups, snapshot fetches and provider rebuilds (one at a time)."""
    global _LOADER
    if _LOADER is None:
        _LOADER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-library")
    return _LOADER


class GroupPin:
    """The (version, provider) a task group runs with, and how many of its copies are running."""

    def __init__(self, loaded: asyncio.Future):
        self.loaded = loaded
        self.sessions = 0


class WorkerLibrary:
    """Per-process cache, for one channel, of the provider built from the latest snapshot (shared by all agent
    loops), and of the snapshot each running task group is pinned to.

    ``connect`` finds the broker (None when nothing is published yet); ``build(snapshot, tokenizer)`` makes the
    provider. Both run in :func:`library_loader`'s thread."""

    def __init__(self, connect: Callable[[], Any] = connect_broker, build: Callable[[Any, Any], Any] | None = None):
        self.tag = NO_TAG  # (publishing driver, library version, iteration)
        self.provider: Any = None
        self._connect = connect
        self._build = build or provider_from_snapshot
        self._lock: asyncio.Lock | None = None
        self._broker: Any = None
        self._loading: asyncio.Future | None = None  # the load in progress, kept across a cancelled waiter
        self._pins: dict[str, GroupPin] = {}

    async def acquire(self, group: str, tokenizer: Any = None) -> tuple[int, Any]:
        """(version, provider) of task group ``group``: the newest published library when its first copy asks,
        the same for every later copy until the last one calls :meth:`release`. Every call that returns must be
        matched by one ``release``; a call that raises needs none."""
        pin = self._pins.get(group)
        first = pin is None
        if first:
            pin = self._pins[group] = GroupPin(asyncio.get_running_loop().create_future())
        pin.sessions += 1
        try:
            if first:
                try:
                    pin.loaded.set_result(await self.refresh(tokenizer))
                except Exception as error:
                    pin.loaded.set_exception(error)
                    raise
                except BaseException:  # cancelled: so are the copies waiting for this load
                    pin.loaded.cancel()
                    raise
            return await asyncio.shield(pin.loaded)
        except BaseException:
            self.release(group)
            raise

    def release(self, group: str) -> None:
        """One copy of ``group`` ended; the last one drops the group's pin."""
        pin = self._pins.get(group)
        if pin is None:
            return
        pin.sessions -= 1
        if pin.sessions <= 0:
            del self._pins[group]
            if pin.loaded.done() and not pin.loaded.cancelled():
                pin.loaded.exception()  # retrieved: a failed load is reported by the copies that awaited it

    @property
    def pinned_groups(self) -> int:
        return len(self._pins)

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


WORKER_LIBRARIES = {channel: WorkerLibrary(connect=lambda channel=channel: connect_broker(channel))
                    for channel in CHANNELS}


def worker_library(split: str) -> WorkerLibrary:
    """This process's library cache for episodes of dataset split ``split``."""
    return WORKER_LIBRARIES[channel_of(split)]


def shutdown_library_loader() -> None:
    """Stop the process's library thread, if one was started (a test session's end)."""
    global _LOADER
    if _LOADER is not None:
        _LOADER.shutdown(wait=True, cancel_futures=True)
        _LOADER = None

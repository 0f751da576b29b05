"""Publishing the experience library from the driver to the agent-loop workers.

The driver (the trainer, inside verl's TaskRunner) owns the library and evolves it once per iteration. It
publishes a snapshot with a version number to a named Ray actor, :class:`LibraryBroker`. Each agent-loop
worker process keeps the provider built from the latest snapshot it has seen and checks the published tag once per
episode (one small RPC); only a new version costs a snapshot transfer. Every step records the version it was
generated with, so a sample can always be traced to the library that shaped its prompt.

A snapshot provider never changes the driver's library: an observation that matches no known cluster founds a
worker-local cluster (ids above the driver's range). verl runs the G sessions of one prompt in one worker, so
the copies of a task share those ids; the driver resolves them to its own clusters (``ExperienceSystem.absorb``)
before it computes advantages, so step groups are the driver's clusters.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

BROKER_NAME = "slea_rl_library_broker"
NO_LIBRARY = -1


@ray.remote(num_cpus=0)
class LibraryBroker:
    """Holds the latest published library snapshot and its version."""

    def __init__(self):
        self._tag = ("", NO_LIBRARY, NO_LIBRARY)
        self._snapshot: Any = None

    def publish(self, publisher: str, version: int, iteration: int, snapshot: Any) -> tuple[str, int, int]:
        """Publish ``snapshot``. The tag (publishing driver, version, iteration) changes with every evolution
        and every new iteration (the warm-up gates depend on the iteration, not only on the library). Workers
        compare tags for equality only, so a driver that starts over (or resumes an older checkpoint) publishes
        normally."""
        tag = (str(publisher), int(version), int(iteration))
        self._tag, self._snapshot = tag, snapshot
        return tag

    def tag(self) -> tuple[str, int, int]:
        return self._tag

    def latest(self) -> tuple[tuple[str, int, int], Any]:
        return self._tag, self._snapshot


_DRIVER_BROKER: ray.actor.ActorHandle | None = None


def get_or_create_broker() -> ray.actor.ActorHandle:
    """The job's broker (created by the driver; idempotent). The handle is kept for the life of the driver
    process: a named actor dies with the last reference to it."""
    global _DRIVER_BROKER
    if _DRIVER_BROKER is None:
        _DRIVER_BROKER = LibraryBroker.options(name=BROKER_NAME, get_if_exists=True, lifetime=None).remote()
    return _DRIVER_BROKER


def find_broker() -> ray.actor.ActorHandle | None:
    try:
        return ray.get_actor(BROKER_NAME)
    except ValueError:
        return None


class WorkerLibrary:
    """Per-process cache of the provider built from the latest snapshot (shared by all agent loops)."""

    def __init__(self):
        self.tag = ("", NO_LIBRARY, NO_LIBRARY)  # (publishing driver, library version, iteration)
        self.provider: Any = None
        self._lock: asyncio.Lock | None = None
        self._broker: ray.actor.ActorHandle | None = None

    async def refresh(self, tokenizer: Any = None) -> tuple[int, Any]:
        """(version, provider) of the newest published library; (-1, None) when nothing is published.

        ``tokenizer`` caps the rendered experience text in tokens (max_experience_length)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            for attempt in range(2):
                if self._broker is None:
                    self._broker = find_broker()
                    if self._broker is None:
                        return NO_LIBRARY, None
                try:
                    tag = tuple(await self._broker.tag.remote())
                    if tag != self.tag:
                        tag, snapshot = await self._broker.latest.remote()
                        self.provider = provider_from_snapshot(snapshot, tokenizer) if snapshot is not None else None
                        self.tag = tuple(tag)
                    break
                except ray.exceptions.RayActorError:
                    # the broker was replaced (a new driver): look it up again once
                    self._broker = None
                    if attempt:
                        raise
        return self.tag[1], self.provider


def provider_from_snapshot(snapshot: Any, tokenizer: Any = None) -> Any:
    """Rebuild the experience provider (observation index + retrieval) of a published snapshot: known clusters
    keep their ids, new observations get worker-local ids that the driver resolves with ``absorb``."""
    from recipe.forge.experience import ExperienceSystem

    return ExperienceSystem.from_snapshot(snapshot, tokenizer).provider


WORKER_LIBRARY = WorkerLibrary()

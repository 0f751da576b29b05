"""Publishing the experience library from the driver to the agent-loop workers.

The driver (the trainer, inside verl's TaskRunner) owns the library and evolves it once per iteration. It
publishes a snapshot with a version number to a named Ray actor, :class:`LibraryBroker`. Each agent-loop
worker process keeps the provider built from the latest snapshot it has seen and checks the version once per
episode (one small RPC); only a new version costs a snapshot transfer. Every step records the version it was
generated with, so a sample can always be traced to the library that shaped its prompt.

Cluster ids that a worker's observation index founds after the snapshot are local to that worker. verl runs
all G sessions of one prompt in the same worker, and step groups are only formed inside one prompt group, so
the grouping stays consistent; the driver's own index re-assigns clusters when it evolves the library.
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
        self._version = NO_LIBRARY
        self._snapshot: Any = None

    def publish(self, version: int, snapshot: Any) -> int:
        if version < self._version:
            raise ValueError(f"library version {version} is older than the published {self._version}")
        self._version, self._snapshot = int(version), snapshot
        return self._version

    def version(self) -> int:
        return self._version

    def latest(self) -> tuple[int, Any]:
        return self._version, self._snapshot


def get_or_create_broker() -> ray.actor.ActorHandle:
    """The job's broker (created by the driver; idempotent)."""
    return LibraryBroker.options(name=BROKER_NAME, get_if_exists=True, lifetime=None).remote()


def find_broker() -> ray.actor.ActorHandle | None:
    try:
        return ray.get_actor(BROKER_NAME)
    except ValueError:
        return None


class WorkerLibrary:
    """Per-process cache of the provider built from the latest snapshot (shared by all agent loops)."""

    def __init__(self):
        self.version = NO_LIBRARY
        self.provider: Any = None
        self._lock: asyncio.Lock | None = None
        self._broker: ray.actor.ActorHandle | None = None

    async def refresh(self) -> tuple[int, Any]:
        """(version, provider) of the newest published library; (-1, None) when nothing is published."""
        if self._broker is None:
            self._broker = find_broker()
            if self._broker is None:
                return NO_LIBRARY, None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            version = await self._broker.version.remote()
            if version != self.version:
                version, snapshot = await self._broker.latest.remote()
                self.provider = provider_from_snapshot(snapshot) if snapshot is not None else None
                self.version = version
        return self.version, self.provider


def provider_from_snapshot(snapshot: Any) -> Any:
    """Rebuild the experience provider (observation index + retrieval) from a published snapshot."""
    from recipe.forge.experience import ExperienceSystem

    return ExperienceSystem.from_snapshot(snapshot).provider


WORKER_LIBRARY = WorkerLibrary()

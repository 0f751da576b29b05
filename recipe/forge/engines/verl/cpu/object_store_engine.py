"""``actor_rollout_ref.rollout.checkpoint_engine.backend=object_store``: the actor's weights to standalone rollout
servers through Ray's object store, for verl's separate_async mode on a CPU.

verl's separate_async trainer syncs its standalone rollout replicas with a checkpoint engine other than the
colocated ``naive`` one (NCCL, NIXL, Mooncake, ...), all of which move GPU buffers. This one, registered in verl's
public ``CheckpointEngineRegistry``, moves host tensors: every actor rank walks the weight generator (gathering an
FSDP2 shard is a collective), rank 0 puts the full weights into Ray's object store once and leaves the reference
in a mailbox actor named for this sync; each rollout worker takes the reference from the mailbox and reads the
weights (on its node: shared memory, no copy through the mailbox). verl's CheckpointEngineManager drives it as it
drives NCCL: ``prepare`` and ``build_topology`` on the driver, ``init_process_group`` on every worker, then
``send_weights`` on the actor ranks and ``receive_weights`` on the rollout workers together, then ``finalize``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncGenerator, Generator

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

BACKEND = "object_store"
POLL_S = 0.05  # a receiver's wait between two looks into the mailbox


@ray.remote(num_cpus=0)
class WeightsMailbox:
    """Holds the reference to one sync's weights (in a list, so that Ray hands the reference on unresolved)."""

    def __init__(self):
        self._stored: list | None = None

    def put(self, stored: list) -> None:
        self._stored = stored

    def get(self) -> list | None:
        return self._stored


@CheckpointEngineRegistry.register(BACKEND)
class ObjectStoreCheckpointEngine(CheckpointEngine):
    """See the module docstring. ``rank`` 0 sends, ranks -1 (the other actor ranks) only walk the generator,
    ranks >= 1 receive."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, **kwargs: Any) -> None:
        self.is_master = is_master
        self.rank: int | None = None
        self.mailbox_name: str | None = None
        self._mailbox: Any = None
        self._stored: Any = None  # the sender's reference, held until finalize

    def prepare(self) -> dict[str, Any]:
        return {"is_master": self.is_master}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        if not metadata or not metadata[0].get("is_master"):
            raise RuntimeError("the object_store checkpoint engine needs actor rank 0 as its sender")
        mailbox = f"slea_rl_weights_{uuid.uuid4().hex}"
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1), "mailbox": [mailbox] * actor_wg_world_size}
        rollout = {"rank": list(range(1, rollout_world_size + 1)), "mailbox": [mailbox] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, mailbox: str) -> None:
        self.rank, self.mailbox_name = int(rank), str(mailbox)
        if self.rank == 0:
            self._mailbox = WeightsMailbox.options(name=self.mailbox_name).remote()

    def finalize(self) -> None:
        if self.rank == 0 and self._mailbox is not None:
            ray.kill(self._mailbox)
        self._mailbox = self._stored = None

    async def send_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                           global_steps: int | None = None) -> dict:
        if self.rank is None or self.rank > 0:
            raise RuntimeError("send_weights runs on the actor ranks, after init_process_group")
        full = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}  # a collective per tensor
        if self.rank == 0:
            self._stored = ray.put(full)
            await self._mailbox.put.remote([self._stored])
        return {}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        if self.rank is None or self.rank < 1:
            raise RuntimeError("receive_weights runs on the rollout workers, after init_process_group")
        mailbox = await self._find_mailbox()
        while True:
            stored = await mailbox.get.remote()
            if stored is not None:
                break
            await asyncio.sleep(POLL_S)
        weights = await stored[0]
        for name, tensor in weights.items():
            yield name, tensor

    async def _find_mailbox(self) -> Any:
        while True:  # the sender creates it in its init_process_group, which runs beside ours
            try:
                return ray.get_actor(self.mailbox_name)
            except ValueError:
                await asyncio.sleep(POLL_S)

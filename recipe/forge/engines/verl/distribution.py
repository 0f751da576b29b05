"""What an iteration's rows say about how the rollout was distributed, as ``forge/*`` metrics.

Every row records the agent-loop worker process that ran its episode (``agent_worker``), the rollout server that
generated it where the server names itself (the CPU backend's hf servers do; ``rollout_server``) and the library
version its prompt was built from. From them, per iteration:

* ``forge/agent_workers_seen``: workers that produced rows;
* ``forge/task_groups_split``: task groups (verl's uid: the G copies of one task) whose rows came from more than
  one worker. verl's V1 agent loop runs all G copies of a prompt in one worker, so 0 is expected; the step groups
  are (uid, cluster) pairs either way, so a split would not merge groups of different tasks, but worker-local
  cluster ids of one task would then come from two workers' indexes;
* ``forge/rollout_servers_seen``: servers that generated rows (0 where servers do not name themselves);
* ``forge/library_versions_seen``: library versions the rows retrieved from (1: every worker used the same).

The layout the trainer ran with (``forge/world_size``, ``forge/rollout_replicas``, ``forge/agent_workers``,
``forge/nodes``) comes from verl's trainer objects, :func:`layout_metrics`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from recipe.forge.engines.verl.library_channel import NO_LIBRARY


def distribution_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The ``forge/*`` distribution figures of an iteration's step rows (their extra_fields)."""
    workers_of_task: dict[str, set[str]] = defaultdict(set)
    workers, servers, versions = set(), set(), set()
    for row in rows:
        worker = str(row.get("agent_worker") or "")
        workers.add(worker)
        workers_of_task[str(row["uid"])].add(worker)
        if row.get("rollout_server"):
            servers.add(str(row["rollout_server"]))
        version = row.get("library_version")
        versions.add(NO_LIBRARY if version is None else int(version))
    return {
        "forge/agent_workers_seen": float(len(workers - {""})),
        "forge/task_groups_split": float(sum(len(w) > 1 for w in workers_of_task.values())),
        "forge/rollout_servers_seen": float(len(servers)),
        "forge/library_versions_seen": float(len(versions)),
    }


def layout_metrics(trainer: Any) -> dict[str, float]:
    """The layout verl's trainer runs with: actor ranks (its worker group's world size), rollout replicas (verl's
    server managers: separate_async's standalone ones too), agent-loop workers, and nodes (of the largest resource
    pool: verl's pools list their processes per node)."""
    metrics = {
        "forge/world_size": float(trainer.actor_rollout_wg.world_size),
        "forge/rollout_replicas": float(sum(len(m.get_replicas()) for m in trainer._rollout_server_managers())),
    }
    manager = getattr(trainer, "agent_loop_manager", None)
    if manager is not None and hasattr(manager, "agent_loop_workers"):
        metrics["forge/agent_workers"] = float(len(manager.agent_loop_workers))
    pools = trainer.resource_pool_manager.resource_pool_dict.values()
    metrics["forge/nodes"] = float(max(len(pool.store) for pool in pools))
    return metrics

"""A Ray process of the run that died (a rollout server, an agent-loop worker, an FSDP rank) ends the run with one
error naming it and the iteration, instead of the chain of Ray tracebacks it arrives as.

When an actor dies, the call that reaches it next raises Ray's ``ActorDiedError`` (a ``RayActorError``); by the
time it reaches verl's trainer it may be wrapped in the ``RayTaskError`` of each actor it passed through (the
agent-loop worker, the TaskRunner). :func:`dead_actor` finds the death under the wrappers. The failure may also
arrive as something else: the agent loop records the episodes a dead server could not answer as failed, and verl's
replay buffer then refuses a batch of failed groups with its own RuntimeError. So when the chain holds no death,
:func:`first_dead` asks each of the run's processes (rollout servers, agent-loop workers, FSDP ranks) whether it is
alive. :func:`describe` names the dead process from Ray's own report of it (class, actor name, pid, node IP), and
the forge trainer raises
:class:`WorkerDiedError` with the iteration (recipe/forge/engines/verl/trainer.py); the driver re-raises it without
the TaskRunner's wrapper (:func:`unwrap`) and ``python -m recipe.forge.main_forge`` prints it and exits with
:data:`EXIT_CODE`.

verl restarts no actor of a run (its rollout servers, agent-loop workers and FSDP ranks have no ``max_restarts``),
so the run ends; checkpoints are written whole before the iteration that failed, and a resume
(``trainer.resume_mode=auto``) continues from the last of them.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

EXIT_CODE = 3
# the lines of Ray's ActorDiedError message that name the process ("\tclass_name: X", "\tname: Y", ...)
FIELDS = ("class_name", "name", "pid", "ip")


class WorkerDiedError(RuntimeError):
    """A Ray process of the run died; the message names it and the iteration."""


def dead_actor(exc: BaseException | None) -> BaseException | None:
    """The Ray ``RayActorError`` (an actor that died or could not start) under ``exc``'s wrappers, or None."""
    from ray.exceptions import RayActorError, RayTaskError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RayActorError) and not isinstance(exc, RayTaskError):
            return exc
        cause = getattr(exc, "cause", None) if isinstance(exc, RayTaskError) else None
        exc = cause or exc.__cause__ or exc.__context__
    return None


def describe(died: BaseException) -> str:
    """``<kind> <name> (<class>, pid <pid>, node <ip>)`` from Ray's report of a dead actor; Ray's first line
    when the report names no process."""
    text = str(died)
    found = {key: match.group(1) for key in FIELDS
             if (match := re.search(rf"^\s*{key}: (\S+)\s*$", text, flags=re.MULTILINE))}
    if "class_name" not in found:
        return f"a Ray actor ({text.strip().splitlines()[0] if text.strip() else type(died).__name__})"
    name, cls = found.get("name"), found["class_name"]
    where = ", ".join(part for part in (cls, found.get("pid") and f"pid {found['pid']}",
                                        found.get("ip") and f"node {found['ip']}") if part)
    return f"{kind(cls)} {name or '(unnamed)'} ({where})"


def kind(class_name: str) -> str:
    """What the actor is to the run, from its class."""
    if "RolloutServer" in class_name:
        return "rollout server"
    if "AgentLoopWorker" in class_name:
        return "agent-loop worker"
    if "Worker" in class_name:  # verl's WorkerDict (an FSDP rank) and the other workers
        return "training worker"
    return "Ray actor"


def first_dead(actors: Iterable[Any], timeout_s: float = 30.0) -> BaseException | None:
    """The ``RayActorError`` of the first of ``actors`` (Ray actor handles) that is dead, or None when every one
    answers (or is too busy to answer within ``timeout_s``: a busy process is not a dead one). All are asked at
    once, so a run of many processes waits ``timeout_s`` at most, not that much per busy process."""
    import ray
    from ray.exceptions import RayActorError

    probes = [actor.__ray_ready__.remote() for actor in actors]
    answered, _ = ray.wait(probes, num_returns=len(probes), timeout=timeout_s)
    answered = set(answered)
    for probe in probes:
        if probe in answered:
            try:
                ray.get(probe)
            except RayActorError as died:
                return died
    return None


def worker_died(exc: BaseException, iteration: int, actors: Iterable[Any] = ()) -> WorkerDiedError | None:
    """The :class:`WorkerDiedError` of ``exc`` raised during ``iteration``, or None when no actor died: the death
    under ``exc``'s wrappers, else the first dead one of ``actors`` (the run's Ray actor handles)."""
    died = dead_actor(exc) or first_dead(actors)
    if died is None:
        return None
    reason = re.search(r"^\s*The actor is dead because (.+)$", str(died), flags=re.MULTILINE)
    return WorkerDiedError(f"{describe(died)} died during iteration {iteration}"
                           + (f": {reason.group(1).strip()}" if reason else ""))


def unwrap(exc: BaseException) -> BaseException:
    """The :class:`WorkerDiedError` a Ray task raised (under its ``RayTaskError``), else ``exc`` itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, WorkerDiedError) else exc

"""Per-environment episode memory that prompts draw their history from (pluggable by ``env.memory``)."""

from agent_system.memory.base import BaseMemory, NoMemory
from agent_system.memory.search import SearchMemory
from agent_system.memory.simple import SimpleMemory


def make_memory(name: str, num_envs: int, default_kind: str = "simple") -> BaseMemory:
    """``name`` is env.memory: "simple" (the environment's default kind), "search" or "none"."""
    kind = default_kind if name == "simple" else name
    classes = {"simple": SimpleMemory, "search": SearchMemory, "none": NoMemory}
    if kind not in classes:
        raise ValueError(f"env.memory={name!r} is unknown; choose one of {sorted(classes)}")
    return classes[kind](num_envs)


__all__ = ["BaseMemory", "NoMemory", "SimpleMemory", "SearchMemory", "make_memory"]

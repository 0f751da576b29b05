"""Per-environment episode memory that prompts draw their history from (pluggable by ``env.memory``)."""

from agent_system.memory.base import BaseMemory, NoMemory, make_memory
from agent_system.memory.search import SearchMemory
from agent_system.memory.simple import SimpleMemory

__all__ = ["BaseMemory", "NoMemory", "SimpleMemory", "SearchMemory", "make_memory"]

"""Single-environment managers kept per worker process and handed from one episode to the next.

verl runs one environment episode per agent-loop ``run()``. Building a fresh manager for each would start a
worker process per episode for heavy environments (ALFWorld, AppWorld: about 128 interpreter starts per
iteration of 16 tasks x 8 copies). Instead each process keeps idle managers, keyed by the environment config
and the split; an episode takes an idle one (its ``reset(seed)`` starts the episode afresh: state, memory and
the environment itself) or builds one, and gives it back when it closes.

Rules:

* a manager serves one episode at a time: episodes running together each hold their own;
* a manager whose episode went wrong (an environment call raised, or the episode is marked failed: crashed or
  hung worker, environment exception) is closed, never reused;
* at most ``max_idle`` managers wait (``SLEA_RL_ENV_POOL_IDLE``, default 64, the size of the environment thread
  pool); beyond that the longest-idle one is closed. 0 turns reuse off. Idle managers are closed at exit.

All methods are synchronous and thread-safe: they run in the environment thread pool (building or closing a
manager can take seconds).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict
from typing import Any

from agent_system.environments.config import EnvConfig

IDLE_ENV_VAR = "SLEA_RL_ENV_POOL_IDLE"


def pool_key(config: EnvConfig, split: str) -> tuple[str, str]:
    """Managers are interchangeable when their (whole) environment config and split are equal. The config holds
    plain values only, so its dataclass repr is a complete, deterministic key."""
    return repr(config), split


class ManagerPool:
    """Idle single-environment managers of one process (oldest first) and the ones lent to episodes."""

    def __init__(self, max_idle: int):
        if max_idle < 0:
            raise ValueError(f"max_idle={max_idle} must be >= 0 ({IDLE_ENV_VAR})")
        self.max_idle = int(max_idle)
        self.built = 0  # managers constructed so far
        self.reused = 0  # episodes served by an idle manager
        self.retired = 0  # managers closed because their episode went wrong
        self._idle: OrderedDict[int, tuple[tuple[str, str], Any]] = OrderedDict()  # id(manager) -> (key, manager)
        self._lent: dict[int, tuple[str, str]] = {}  # id(manager) -> key, while an episode holds it
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Idle managers."""
        return len(self._idle)

    def acquire(self, manager_class: type, config: EnvConfig, split: str) -> Any:
        """An idle manager for (config, split), else a new ``manager_class(config, num_tasks=1, split=split)``."""
        key = pool_key(config, split)
        with self._lock:
            for ident, (idle_key, manager) in self._idle.items():
                if idle_key == key:
                    del self._idle[ident]
                    self._lent[ident] = key
                    self.reused += 1
                    return manager
            self.built += 1
        manager = manager_class(config, num_tasks=1, split=split)
        with self._lock:
            self._lent[id(manager)] = key
        return manager

    def release(self, manager: Any, reusable: bool) -> None:
        """Take back a manager lent by ``acquire``; it is closed when not ``reusable`` or when the pool is full."""
        with self._lock:
            key = self._lent.pop(id(manager), None)
            if key is None:
                raise ValueError(f"{type(manager).__name__} at {id(manager):#x} was not lent by this pool")
            evicted = []
            if reusable:
                self._idle[id(manager)] = (key, manager)
                while len(self._idle) > self.max_idle:
                    evicted.append(self._idle.popitem(last=False)[1][1])
            else:
                self.retired += 1
                evicted.append(manager)
        for old in evicted:
            old.close()

    def close(self) -> None:
        """Close every idle manager (at process exit, or in tests)."""
        with self._lock:
            managers = [manager for _, manager in self._idle.values()]
            self._idle.clear()
        for manager in managers:
            manager.close()


def max_idle_from_env() -> int:
    raw = os.environ.get(IDLE_ENV_VAR, "64")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{IDLE_ENV_VAR}={raw!r} must be an integer >= 0 (idle environment managers kept)") from None


_POOL: ManagerPool | None = None
_POOL_LOCK = threading.Lock()


def process_manager_pool() -> ManagerPool:
    """The worker process's pool (created on first use, closed at exit)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ManagerPool(max_idle_from_env())
            atexit.register(_POOL.close)
        return _POOL


def close_process_manager_pool() -> None:
    """Close the process's idle managers now rather than at exit (a test session's end)."""
    if _POOL is not None:
        _POOL.close()

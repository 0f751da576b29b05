"""How busy the rollout servers were, per iteration: ``forge/rollout_busy_share``.

The trainer's own waiting is verl's ``timing_s/gen`` (its time in the replay buffer's ``sample``, waiting for
finished task groups) against ``timing_s/step``. The other side is the rollout servers: the share of an
iteration's wall time they spent decoding, over all servers (1.0: every server decoded all the time; the rest of
the time they waited for requests, were paused for training or a weight sync). Servers that count their decoding
time answer ``busy_seconds()`` (the CPU backend's hf server); with others (vLLM, SGLang) the figure is absent.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import ray


class RolloutLoad:
    """The servers' decoding time between two calls of :meth:`metrics`."""

    def __init__(self):
        self._last: tuple[float, float] | None = None  # (wall clock, the servers' total busy seconds)

    def metrics(self, servers: Sequence[Any]) -> dict[str, float]:
        """``forge/rollout_busy_share`` (and ``forge/rollout_busy_s``) since the previous call; nothing on the first
        call (it starts the clock) or when a server does not count its time."""
        counting = [server for server in servers if hasattr(server, "busy_seconds")]
        if not counting or len(counting) != len(servers):
            return {}
        now, busy = time.monotonic(), float(sum(ray.get([server.busy_seconds.remote() for server in counting])))
        last, self._last = self._last, (now, busy)
        if last is None or now <= last[0]:
            return {}
        spent = busy - last[1]
        return {"forge/rollout_busy_s": spent, "forge/rollout_busy_share": spent / ((now - last[0]) * len(counting))}

"""ProcessEnvPool: environments spread over worker processes, with a per-step timeout.

Each worker hosts a contiguous block of environments. A command goes to every worker involved at once;
each worker steps its environments one by one and sends its results in chunks as they become ready (at
least every 20 ms of work). The timeout (``step_timeout_s``) thus applies to each environment's step: a
worker that sends nothing for that long is considered hung. A new worker first reports that it is ready (its
interpreter started and its imports done); until then ``start_timeout_s`` applies instead, so a slow start-up on a
loaded machine is not taken for a hung step. A worker that dies (crash, ``os._exit``, OOM kill) or hangs is
killed and replaced by a fresh one; every episode it hosted ends as failed with the reason in
``info["failure_reason"]`` and stays failed until the next reset. The other workers' results are unaffected.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from multiprocessing import connection as mp_connection
from typing import Any, Sequence

import numpy as np

from agent_system.environments.episode import EnvSpec, StepResult, failed_result
from agent_system.workers.in_process import run_call, run_reset, run_step

_FLUSH_S = 0.02  # a worker sends the results it has after this long, so progress is visible early
_READY = "ready"  # a worker's first message: started, imports done, serving commands


def _worker_main(conn, spec: EnvSpec, num_local: int) -> None:
    """Serve commands for ``num_local`` environments until "close" (runs in the worker process).
    Each command's items are answered in order, in chunks (see the flush rule below)."""
    envs: list = [None] * num_local
    conn.send(_READY)

    def env(k: int):
        if envs[k] is None:
            envs[k] = spec.build()
        return envs[k]

    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, OSError):
            break
        if cmd == "close":
            for e in envs:
                if e is not None:
                    e.close()
            conn.send(None)
            break
        chunk: list = []
        last_flush = time.monotonic()
        for n, (k, arg) in enumerate(payload):
            if cmd == "reset":
                chunk.append(run_reset(env(k), arg))
            elif cmd == "step":
                chunk.append(run_step(env(k), arg))
            else:  # "call": arg is the method name
                chunk.append(run_call(env(k), arg))
            # flush at the end, or when results have waited a while: cheap environments send one message
            # per command, slow ones report each step (the parent's per-step timeout hears from them)
            if n == len(payload) - 1 or time.monotonic() - last_flush >= _FLUSH_S:
                _send_results(conn, chunk, cmd)
                chunk = []
                last_flush = time.monotonic()


def _send_results(conn, chunk: list, cmd: str) -> None:
    """Send a chunk of results; a result that cannot be pickled (an environment put a lock, a generator, a
    socket... in its ``info``) ends that episode as failed instead of killing the worker and its other episodes."""
    try:
        conn.send(chunk)
        return
    except Exception:  # pickling raises PicklingError, TypeError or AttributeError; nothing was written yet
        pass
    safe = []
    for result in chunk:
        try:
            pickle.dumps(result)
            safe.append(result)
        except Exception as exc:
            reason = f"env error: the environment's {cmd} result cannot be sent between processes ({type(exc).__name__}: {exc})"
            safe.append(None if cmd == "call" else failed_result(reason))
    conn.send(safe)


class ProcessEnvPool:
    """``num_envs`` environments built from ``spec`` inside ``num_workers`` processes."""

    def __init__(self, spec: EnvSpec, num_envs: int, num_workers: int, step_timeout_s: float = 120.0,
                 start_method: str = "spawn", start_timeout_s: float = 120.0):
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers={num_workers} must be in [1, num_envs={num_envs}]")
        self.spec = spec
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.step_timeout_s = step_timeout_s
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context(start_method)
        blocks = np.array_split(np.arange(num_envs), num_workers)
        self._members = [b.tolist() for b in blocks]
        self._worker_of = np.concatenate([np.full(len(b), w) for w, b in enumerate(blocks)])
        self._local_of = np.concatenate([np.arange(len(b)) for b in blocks])
        self._broken: list[str | None] = [None] * num_envs  # reason an env's episode was lost until reset
        self.restarts = 0
        self._procs: list = [None] * num_workers
        self._conns: list = [None] * num_workers
        self._ready: list[bool] = [False] * num_workers
        for w in range(num_workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.spec, len(self._members[w])), daemon=True)
        proc.start()
        child.close()
        self._procs[w], self._conns[w], self._ready[w] = proc, parent, False

    def _restart(self, w: int, reason: str) -> None:
        proc = self._procs[w]
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        self._conns[w].close()
        self.restarts += 1
        for i in self._members[w]:
            self._broken[i] = reason
        self._start(w)

    def _dispatch(self, cmd: str, indices: Sequence[int], items: Sequence[Any], on_fail) -> list[Any]:
        """Send each worker its share, collect results as they stream in, and map the whole share of a
        worker that dies or stays silent past the timeout through ``on_fail(reason)``."""
        out: list[Any] = [None] * len(indices)
        shares: dict[int, list[int]] = {}
        for j, i in enumerate(indices):
            shares.setdefault(int(self._worker_of[i]), []).append(j)
        pending: dict[int, int] = {}  # worker -> results received so far
        for w, js in shares.items():
            try:
                self._conns[w].send((cmd, [(int(self._local_of[indices[j]]), items[j]) for j in js]))
                pending[w] = 0
            except (BrokenPipeError, OSError):
                self._fail(w, js, out, on_fail, self._crash_reason(w))
        last_heard = {w: time.monotonic() for w in pending}
        while pending:
            wait_s = max(0.0, min(last_heard[w] + self._patience(w) for w in pending) - time.monotonic())
            ready = set(mp_connection.wait([self._conns[w] for w in pending], timeout=wait_s))
            for w in list(pending):
                if self._conns[w] in ready:
                    try:
                        result = self._conns[w].recv()  # a chunk of results, in order
                    except (EOFError, OSError):
                        self._fail(w, shares[w], out, on_fail, self._crash_reason(w))
                        del pending[w]
                        continue
                    last_heard[w] = time.monotonic()
                    if result == _READY:
                        self._ready[w] = True
                        continue
                    for r in result:
                        out[shares[w][pending[w]]] = r
                        pending[w] += 1
                    if pending[w] == len(shares[w]):
                        del pending[w]
                elif time.monotonic() - last_heard[w] >= self._patience(w):
                    self._fail(w, shares[w], out, on_fail, self._silence_reason(w))
                    del pending[w]
        return out

    def _patience(self, w: int) -> float:
        """How long worker ``w`` may stay silent: a step's timeout once it is ready, its start-up's before."""
        return self.step_timeout_s if self._ready[w] else self.start_timeout_s

    def _silence_reason(self, w: int) -> str:
        if self._ready[w]:
            return f"step timeout (> {self.step_timeout_s:g} s): worker restarted"
        return f"worker start-up timeout (> {self.start_timeout_s:g} s): worker restarted"

    def _crash_reason(self, w: int) -> str:
        proc = self._procs[w]
        proc.join(timeout=1)
        return f"worker crashed (exit code {proc.exitcode}): worker restarted"

    def _fail(self, w: int, js: list[int], out: list[Any], on_fail, reason: str) -> None:
        self._restart(w, reason)
        for j in js:
            out[j] = on_fail(reason)

    def reset(self, indices: Sequence[int], seeds: Sequence[int]) -> list[StepResult]:
        for i in indices:
            self._broken[i] = None
        return self._dispatch("reset", indices, [int(s) for s in seeds], failed_result)

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        live = [j for j, i in enumerate(indices) if self._broken[i] is None]
        out: list[StepResult] = [failed_result(self._broken[i]) if self._broken[i] else None for i in indices]  # type: ignore[misc]
        if live:
            results = self._dispatch("step", [indices[j] for j in live], [actions[j] for j in live], failed_result)
            for j, r in zip(live, results):
                out[j] = r
        return out

    def call(self, method: str, indices: Sequence[int]) -> list[Any]:
        live = [j for j, i in enumerate(indices) if self._broken[i] is None]
        out: list[Any] = [None] * len(indices)
        if live:
            sub = [indices[j] for j in live]
            results = self._dispatch("call", sub, [method] * len(sub), lambda reason: None)
            for j, r in zip(live, results):
                out[j] = r
        return out

    def worker_pids(self) -> list[int | None]:
        """Each worker's process id, None for a worker whose process is not running (closed, or died and not yet
        replaced); a restarted worker has a new process id."""
        return [proc.pid if proc.is_alive() else None for proc in self._procs]

    def close(self) -> None:
        for w, conn in enumerate(self._conns):
            try:
                conn.send(("close", None))
                while conn.poll(5) and conn.recv() is not None:  # a ready message not read yet comes first
                    pass
            except (EOFError, OSError):
                pass
            self._procs[w].join(timeout=5)
            if self._procs[w].is_alive():
                self._procs[w].kill()
                self._procs[w].join(timeout=5)
            conn.close()

    def __del__(self):
        for proc in getattr(self, "_procs", []):
            if proc is not None and proc.is_alive():
                proc.kill()

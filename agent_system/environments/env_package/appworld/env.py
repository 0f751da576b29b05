"""AppworldEnv: one AppWorld task, executed by a bridge process in AppWorld's own interpreter (bridge.py).

The action is Python code (optionally fenced in ```python); the observation is its output. The episode ends
when the code calls ``apis.supervisor.complete_task(...)``: reward 10 when AppWorld's evaluation passes all
tests, ``task_score`` is the fraction of tests passed.

Model-written code runs in the bridge process, never in the trainer's: the bridge gets a reduced environment
(only the variables in :data:`KEPT_ENV` and ``APPWORLD_*``, so API keys and tokens of the trainer's environment
are not visible to it), runs in its own process group, and each request has a time limit (``timeout_s``,
``env.appworld.timeout_s``): past it the whole group is killed, the episode ends as failed and the next reset
starts a fresh bridge. This contains hangs, runaway loops and stray child processes; it is NOT a security
sandbox: the code still runs as the trainer's user, with that user's file-system and network access
(docs/integrations.md says what to do for untrusted models).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from typing import Any

from agent_system.environments.episode import AgentEnv
from agent_system.json_input import loads as read_json

WIN_REWARD = 10.0
BRIDGE = os.path.join(os.path.dirname(__file__), "bridge.py")
STANDIN_DIR = os.path.join(os.path.dirname(__file__), "standin")
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT")
_FENCE = re.compile(r"^\s*```(?:python|py)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


class BridgeError(RuntimeError):
    """The bridge process died, timed out or answered with an error."""


def bridge_environment(use_standin: bool) -> dict[str, str]:
    """The bridge's environment variables: the harmless basics and AppWorld's own, nothing else."""
    env = {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("APPWORLD")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if use_standin:
        env["PYTHONPATH"] = STANDIN_DIR
    return env


def strip_fence(code: str) -> str:
    m = _FENCE.match(code or "")
    return m.group(1) if m else (code or "")


class AppworldEnv(AgentEnv):
    def __init__(self, python: str = "", dataset: str = "train", use_standin: bool = False,
                 experiment_name: str = "slea_rl", timeout_s: float = 30.0):
        self._cmd = [python or sys.executable, BRIDGE, "--dataset", dataset, "--experiment-name", experiment_name]
        self._use_standin = use_standin
        self.timeout_s = float(timeout_s)
        self._proc = self._start()
        self._task: dict[str, Any] = {}
        self._done = False
        self._expert_used = False

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(self._cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=bridge_environment(self._use_standin), start_new_session=True)

    def _kill(self) -> None:
        """Kill the bridge and everything the agent's code started from it (its process group)."""
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()

    def _request(self, **payload: Any) -> dict[str, Any]:
        try:
            self._proc.stdin.write(json.dumps(payload) + "\n")
            self._proc.stdin.flush()
            line = self._read_reply(time.monotonic() + self.timeout_s)
        except (BrokenPipeError, OSError) as exc:
            raise BridgeError(f"AppWorld bridge is gone: {exc}; stderr: {self._stderr_tail()}") from exc
        if not line:
            tail = self._stderr_tail()
            raise BridgeError(f"AppWorld bridge exited ({self._proc.poll()}): {tail}")
        try:
            reply = read_json(line, "the AppWorld bridge's reply")
        except ValueError as exc:  # something in the sandbox wrote to the protocol's stream
            raise BridgeError(str(exc)) from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise BridgeError(str(reply.get("error", "unknown bridge error")) if isinstance(reply, dict)
                              else "the AppWorld bridge's reply is not an object")
        return reply

    def _read_reply(self, deadline: float) -> str:
        """One reply line, or BridgeError (after killing the bridge) when none comes before ``deadline``."""
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, left))
        if not ready:
            self._kill()
            raise BridgeError(f"AppWorld code ran longer than timeout_s={self.timeout_s:g} s; the bridge was killed")
        return self._proc.stdout.readline()

    def _stderr_tail(self) -> str:
        """The bridge's last words once it has exited (its stdout closed: it is exiting or gone)."""
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return ""
        return self._proc.stderr.read()[-2000:]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        if self._proc.poll() is not None:  # killed after a timeout (or died): a fresh bridge for a fresh episode
            self._proc = self._start()
        self._task = self._request(cmd="reset", index=int(seed))
        self._done = False
        self._expert_used = False
        obs = f"Supervisor: {self._task['supervisor']}\nTask: {self._task['instruction']}"
        return obs, self._info(won=False, task_score=0.0)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        reply = self._request(cmd="execute", code=strip_fence(action))
        if not reply["completed"]:
            return reply["output"], 0.0, False, False, self._info(won=False, task_score=0.0)
        self._done = True
        won = bool(reply["success"])
        info = self._info(won=won, task_score=float(reply["pass_fraction"]))
        info["num_tests"] = reply["num_tests"]
        return reply["output"], WIN_REWARD if won else 0.0, True, False, info

    def expert_action(self) -> str | None:
        """The stand-in's solution code (real AppWorld exposes none to the bridge)."""
        code = self._task.get("expert_code")
        if self._done or not code or self._expert_used:
            return None
        self._expert_used = True
        return code

    def _info(self, won: bool, task_score: float) -> dict[str, Any]:
        return {"won": won, "task_score": task_score, "task": self._task.get("instruction", ""),
                "task_type": None, "task_id": self._task.get("task_id")}

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"cmd": "close"}) + "\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                self._kill()

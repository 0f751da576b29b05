"""AppworldEnv: one AppWorld task, executed by a bridge process in AppWorld's own interpreter (bridge.py).

The action is Python code (optionally fenced in ```python); the observation is its output. The episode ends
when the code calls ``apis.supervisor.complete_task(...)``: reward 10 when AppWorld's evaluation passes all
tests, ``task_score`` is the fraction of tests passed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from agent_system.environments.base import AgentEnv

WIN_REWARD = 10.0
BRIDGE = os.path.join(os.path.dirname(__file__), "bridge.py")
STANDIN_DIR = os.path.join(os.path.dirname(__file__), "standin")
_FENCE = re.compile(r"^\s*```(?:python|py)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


class BridgeError(RuntimeError):
    """The bridge process died or answered with an error."""


def strip_fence(code: str) -> str:
    m = _FENCE.match(code or "")
    return m.group(1) if m else (code or "")


class AppworldEnv(AgentEnv):
    def __init__(self, python: str = "", dataset: str = "train", use_standin: bool = False, experiment_name: str = "slea_rl"):
        env = dict(os.environ)
        if use_standin:
            env["PYTHONPATH"] = STANDIN_DIR + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [python or sys.executable, BRIDGE, "--dataset", dataset, "--experiment-name", experiment_name]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._task: dict[str, Any] = {}
        self._done = False
        self._expert_used = False

    def _request(self, **payload: Any) -> dict[str, Any]:
        try:
            self._proc.stdin.write(json.dumps(payload) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise BridgeError(f"AppWorld bridge is gone: {exc}; stderr: {self._stderr_tail()}") from exc
        if not line:
            tail = self._stderr_tail()
            raise BridgeError(f"AppWorld bridge exited ({self._proc.poll()}): {tail}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise BridgeError(reply.get("error", "unknown bridge error"))
        return reply

    def _stderr_tail(self) -> str:
        """The bridge's last words once it has exited (its stdout closed: it is exiting or gone)."""
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return ""
        return self._proc.stderr.read()[-2000:]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
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
                self._proc.kill()
                self._proc.wait()

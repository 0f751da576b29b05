"""``trainer.rollout_data_dir`` on the embedded engine: every training iteration's steps as JSONL, as verl writes
its generations (``<rollout_data_dir>/<iteration>.jsonl``, one line per step, verl's ``input``, ``output``,
``score`` and ``step`` keys), plus the episode fields a multi-turn run needs to be read back.

A line::

    {"step": 3, "input": "<the prompt the policy was given, decoded>", "output": "<its response>",
     "score": 0.0, "task": "...", "traj_uid": "...", "turn": 0, "observation": "...", "action": "+",
     "valid": true, "done": false, "episode_reward": 1.0, "success": true,
     "cluster_id": 4, "experience_ids": ["12", "13"]}

``step`` is the iteration (verl's global step); ``turn`` the step within the episode. The file of an iteration
is written atomically, so a rerun after a resume replaces it whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.durable import write_text_atomic


def step_lines(trajectories: Sequence[TrajectoryRecord], iteration: int,
               decode: Callable[[list[int]], str]) -> list[dict]:
    """One record per step of ``trajectories``, in episode order (fields in the module docstring)."""
    out = []
    for traj in trajectories:
        for record in traj.steps:
            out.append({
                "step": iteration, "input": decode(record.prompt_ids), "output": record.response_text,
                "score": float(record.reward), "task": traj.task, "traj_uid": traj.traj_uid, "turn": record.step,
                "observation": record.anchor_obs, "action": record.action, "valid": bool(record.is_action_valid),
                "done": bool(record.done), "episode_reward": float(traj.episode_reward),
                "success": bool(traj.success), "cluster_id": record.cluster_id,
                "experience_ids": list(record.experience_ids),
            })
    return out


def dump_rollouts(directory: str | Path, trajectories: Sequence[TrajectoryRecord], iteration: int,
                  decode: Callable[[list[int]], str]) -> Path:
    """Write ``<directory>/<iteration>.jsonl``; returns its path."""
    path = Path(directory) / f"{iteration}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = step_lines(trajectories, iteration, decode)
    write_text_atomic(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return path

"""``trainer.rollout_data_dir``: the steps the policy took, as JSONL, one file per pass and iteration, in one
format that every engine writes (the embedded trainer, prompt-only mode, and the verl trainer for its
validation; see docs/outputs.md, "Rollout dumps").

Layout (``iteration`` is verl's global step: iterations done, so training iteration 0 writes ``1.jsonl`` and
validation before training ``val/0.jsonl``)::

    <rollout_data_dir>/<iteration>.jsonl                 training steps (embedded engine, prompt-only mode)
    <rollout_data_dir>/val/<iteration>.jsonl             validation with the library (a baseline: its only pass)
    <rollout_data_dir>/val_no_library/<iteration>.jsonl  forge's validation without the library

One line per environment step, verl's ``input``, ``output``, ``score`` and ``step`` keys plus the episode fields
a multi-turn run needs to be read back::

    {"step": 3, "input": "<the prompt the policy was given>", "output": "<its response>", "score": 0.0,
     "task": "...", "traj_uid": "...", "turn": 0, "observation": "...", "next_observation": "...", "action": "+",
     "valid": true,
     "done": false, "episode_reward": 1.0, "success": true, "cluster_id": 4, "experience_ids": ["12"],
     "experiences": [{"id": "12", "zone": "golden", "level": "example", "text": "At \\"...\\", answer with ...",
                      "advice": null}],
     "admissible_actions": ["+", "-"], "expert_action": null, "hidden_state": "", "next_hidden_state": ""}

``step`` is the iteration; ``turn`` the step within the episode; ``next_observation`` the observation the step led
to (null where the environment ended the episode); ``hidden_state`` and ``next_hidden_state`` what the environment
says those observations leave out of their states ("" where it reports nothing). ``experiences`` are the shown
entries as the library held them when the pass ran (``text`` is the lesson; ``input`` shows it as rendered, the
last entry possibly cut to ``max_experience_length``; ``advice``: the entry's checkable advice,
``Advice.as_dict()``, null where it has none); an entry the library no longer holds has only its ``id`` (the other
fields null). A file is written atomically, so a rerun after a resume replaces it whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_system.multi_turn_rollout.protocols import Message, StepRecord, TrajectoryRecord
from recipe.forge.runs.durable import write_text_atomic

PromptText = Callable[[StepRecord], str]  # the prompt of a step as the policy was given it
ENTRY_FIELDS = ("zone", "level", "text", "advice")


def decoded_prompt(decode: Callable[[list[int]], str]) -> PromptText:
    """The prompt as its token ids decode (chat template included): the engines that tokenize."""
    return lambda record: decode(record.prompt_ids)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def chat_prompt(record: StepRecord) -> str:
    """The prompt as chat messages (``<role>: <text>``, blank-line separated; image parts left out): prompt-only
    mode, whose endpoint is sent messages, not token ids."""
    messages: list[Message] = record.messages
    return "\n\n".join(f"{m['role']}: {_content_text(m['content'])}" for m in messages)


def entry_view(entry: Any) -> dict[str, Any]:
    """An ExperienceEntry as a line's ``experiences`` element."""
    advice = getattr(entry, "advice", None)
    return {"id": str(entry.entry_id), "zone": entry.zone, "level": entry.level, "text": entry.text,
            "advice": None if advice is None else advice.as_dict()}


def shown_entries(trajectories: Sequence[TrajectoryRecord], library: Any | None) -> dict[str, dict[str, Any]]:
    """The entries of ``library`` (an ExperienceLibrary, None: no library) that the steps were shown, by id, as
    plain data: taken before evolution, which may prune or change them."""
    if library is None:
        return {}
    ids = {raw for traj in trajectories for record in traj.steps for raw in record.experience_ids}
    return {raw: entry_view(library.entries[int(raw)]) for raw in ids if int(raw) in library.entries}


def step_lines(trajectories: Sequence[TrajectoryRecord], iteration: int, prompt_text: PromptText,
               entries: Mapping[str, dict[str, Any]] | None = None) -> list[dict]:
    """One record per step of ``trajectories``, in episode order (fields in the module docstring); ``entries``:
    :func:`shown_entries` of the library the steps were shown."""
    entries = entries or {}
    unknown = dict.fromkeys(ENTRY_FIELDS)
    out = []
    for traj in trajectories:
        for record in traj.steps:
            out.append({
                "step": iteration, "input": prompt_text(record), "output": record.response_text,
                "score": float(record.reward), "task": traj.task, "traj_uid": traj.traj_uid, "turn": record.step,
                "observation": record.anchor_obs, "next_observation": record.next_anchor_obs,
                "action": record.action, "valid": bool(record.is_action_valid),
                "done": bool(record.done), "episode_reward": float(traj.episode_reward),
                "success": bool(traj.success), "cluster_id": record.cluster_id,
                "experience_ids": [str(raw) for raw in record.experience_ids],
                "experiences": [entries.get(str(raw)) or {"id": str(raw), **unknown} for raw in record.experience_ids],
                "admissible_actions": list(record.admissible_actions), "expert_action": record.expert_action,
                "hidden_state": record.hidden_state, "next_hidden_state": record.next_hidden_state,
            })
    return out


def dump_path(directory: str | Path, iteration: int, pass_name: str | None = None) -> Path:
    """``<directory>/<iteration>.jsonl`` (training) or ``<directory>/<pass_name>/<iteration>.jsonl``."""
    folder = Path(directory) if pass_name is None else Path(directory) / pass_name
    return folder / f"{int(iteration)}.jsonl"


@dataclass
class RolloutDump:
    """Where a run writes its dumps (``trainer.rollout_data_dir``) and how it writes a step's prompt."""

    directory: Path
    prompt_text: PromptText

    def write(self, trajectories: Sequence[TrajectoryRecord], iteration: int,
              entries: Mapping[str, dict[str, Any]] | None = None, pass_name: str | None = None) -> Path:
        """Write one pass of ``iteration`` (``pass_name`` None: training; else ``val`` / ``val_no_library``);
        returns its path."""
        path = dump_path(self.directory, iteration, pass_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = step_lines(trajectories, iteration, self.prompt_text, entries)
        write_text_atomic(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        return path


def rollout_dump(directory: str | None, prompt_text: PromptText) -> RolloutDump | None:
    """The run's dump, None when ``trainer.rollout_data_dir`` is not set."""
    return RolloutDump(Path(directory), prompt_text) if directory else None

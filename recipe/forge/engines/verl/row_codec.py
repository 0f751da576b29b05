"""The verl row codec: a step of the rollout protocol as the forge agent loop writes it into verl's batch, and back.

The forge agent loop returns one AgentLoopOutput per step and verl stores each as one training row. verl keeps a
step's tokens in its own columns (the output's ``prompt_ids``, ``response_ids`` and ``response_logprobs``: the
batch's ``prompts``, ``responses`` and ``rollout_log_probs``) and everything else in the row's ``extra_fields``,
one dict per row, which the trainer and the library driver read back. This module is the one place that says
what that dict holds:

* every field of the step's StepRecord (:func:`dataclasses.fields`, so a field added to StepRecord travels
  without a change here) under its own name, but for the token fields (:data:`TOKEN_FIELDS`: verl's columns
  carry them); tuples travel as lists, and image parts of the messages
  without their pixels (verl keeps the images in the output's multi_modal_data and stores no raw image);
* every field of the step's TrajectoryRecord but the ones the step carries itself and the steps (likewise);
* what a row carries of its step besides (:class:`StepExtras`).

Every field keeps its own name. The trainer's advantage step reads its step samples through
:func:`samples_from_rows`, and the driver its records and trajectories through :func:`record_from_row` and
:func:`trajectories_from_rows`: no other reader knows the row's keys.

verl's own keys (``reward_extra_info``, ``min_global_steps``, ``max_global_steps``) are the agent loop's to add;
the decoder leaves them alone.
"""

from __future__ import annotations

import functools
import types
import typing
from collections import defaultdict
from dataclasses import Field, dataclass, fields
from typing import Any, Mapping, Sequence

from agent_system.multi_turn_rollout.protocols import Message, StepRecord, TrajectoryRecord
from recipe.forge.step_samples import StepSamples

# StepRecord fields that travel in verl's own columns, not in extra_fields; a reader that fetched them adds them
# to the row under these names (the validation dump adds prompt_ids), and they are empty where it did not.
TOKEN_FIELDS = ("prompt_ids", "response_ids", "logprobs")
# TrajectoryRecord fields a row does not carry as the episode's: the step carries them, or they are the rows
EPISODE_SKIPPED = ("uid", "traj_uid", "steps")


@dataclass
class StepExtras:
    """What a row carries of its step besides its StepRecord and episode."""

    experience_text: str = ""  # the experience text the step was shown
    student_prompt_ids: list[int] | None = None  # the plain prompt's ids (self-distillation), None otherwise
    agent_worker: str = ""  # the agent-loop worker process that ran the episode ("host:pid")
    rollout_server: str = ""  # the rollout server that generated the step, where the server names itself


def step_fields() -> list[Field]:
    """The StepRecord fields a row's extra_fields carry (all but :data:`TOKEN_FIELDS`)."""
    return [f for f in fields(StepRecord) if f.name not in TOKEN_FIELDS]


def episode_fields() -> list[Field]:
    """The TrajectoryRecord fields every row of the episode carries."""
    return [f for f in fields(TrajectoryRecord) if f.name not in EPISODE_SKIPPED]


def row_from_record(record: StepRecord, trajectory: TrajectoryRecord, extras: StepExtras) -> dict[str, Any]:
    """The extra_fields of one step's row: ``record``'s fields, those of the episode it belongs to
    (``trajectory``; its steps are not read) and ``extras``."""
    row = {f.name: _encode(f.name, getattr(record, f.name)) for f in step_fields()}
    row.update({f.name: _encode(f.name, getattr(trajectory, f.name)) for f in episode_fields()})
    row.update({f.name: _encode(f.name, getattr(extras, f.name)) for f in fields(StepExtras)})
    return row


def record_from_row(row: Mapping[str, Any]) -> StepRecord:
    """The StepRecord a row was written from (:func:`row_from_record`); token fields the row lacks are empty."""
    hints = _hints(StepRecord)
    values = {f.name: _decode(hints[f.name], _read(row, f.name)) for f in step_fields()}
    values.update({name: list(row.get(name) or ()) for name in TOKEN_FIELDS})
    return StepRecord(**values)


def extras_from_row(row: Mapping[str, Any]) -> StepExtras:
    """The StepExtras a row was written with."""
    hints = _hints(StepExtras)
    return StepExtras(**{f.name: _decode(hints[f.name], _read(row, f.name)) for f in fields(StepExtras)})


def forge_rows(rows: Sequence[Any]) -> list[Mapping[str, Any]]:
    """``rows`` (extra_fields, bare or in verl's NonTensorData) as mappings; a row the forge agent loop did not
    write is a ValueError saying so."""
    rows = [getattr(row, "data", row) for row in rows]
    foreign = [i for i, row in enumerate(rows) if not isinstance(row, Mapping) or "traj_uid" not in row]
    if foreign:
        raise ValueError(f"{len(foreign)} batch rows (first: {foreign[0]}) carry no forge step fields in extra_fields; "
                         "SLEA-RL needs actor_rollout_ref.rollout.agent.default_agent_loop=forge_agent")
    return rows


def trajectories_from_rows(rows: Sequence[Any]) -> list[TrajectoryRecord]:
    """The TrajectoryRecords of the rows' steps (:func:`forge_rows`), one per traj_uid in order of first
    appearance, each with its steps ordered by step index and the episode's fields from its last step's row."""
    by_traj: dict[str, list[tuple[StepRecord, Mapping[str, Any]]]] = defaultdict(list)
    for row in forge_rows(rows):
        record = record_from_row(row)
        by_traj[record.traj_uid].append((record, row))
    hints = _hints(TrajectoryRecord)
    trajectories = []
    for traj_uid, pairs in by_traj.items():
        pairs.sort(key=lambda pair: pair[0].step)
        steps = [record for record, _ in pairs]
        last = pairs[-1][1]
        episode = {f.name: _decode(hints[f.name], _read(last, f.name)) for f in episode_fields()}
        trajectories.append(TrajectoryRecord(uid=steps[0].uid, traj_uid=traj_uid, steps=steps, **episode))
    return trajectories


def samples_from_rows(rows: Sequence[Any]) -> StepSamples:
    """The step samples of training rows (:func:`forge_rows`, in row order; verl's ``uid`` column is the records'
    uid)."""
    rows = forge_rows(rows)
    records = [record_from_row(row) for row in rows]
    episodes = {record.traj_uid: row for record, row in zip(records, rows)}
    return StepSamples.from_records(records, {t: float(_read(row, "episode_reward")) for t, row in episodes.items()},
                                    {t: bool(_read(row, "success")) for t, row in episodes.items()})


def without_pixels(messages: list[Message]) -> list[Message]:
    """``messages`` with every image part's pixels left out (the part keeps its other keys, e.g. its type)."""
    def part(p: Any) -> Any:
        return {k: v for k, v in p.items() if k != "image"} if isinstance(p, dict) and p.get("type") == "image" else p

    return [{**m, "content": [part(p) for p in m["content"]]} if isinstance(m.get("content"), list) else m
            for m in messages]


def _encode(name: str, value: Any) -> Any:
    if name in ("messages", "plain_messages"):
        return without_pixels(value)
    return list(value) if isinstance(value, tuple) else value


def _read(row: Mapping[str, Any], name: str) -> Any:
    if name not in row:
        raise KeyError(f"a forge row has no {name!r}: was it written by row_from_record?")
    return row[name]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(hint: Any, value: Any) -> Any:
    """``value`` as the field's type holds it: a list back to a tuple where the field is one."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if isinstance(value, list) and any(typing.get_origin(option) is tuple for option in options):
        return tuple(value)
    return value

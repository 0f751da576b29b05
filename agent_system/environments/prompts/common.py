"""What every prompt template receives, and the pieces they share (history block, answer format)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass
class HistoryStep:
    """One remembered step: the observation the agent saw and the action it took (the projected action,
    never the reasoning)."""

    step: int
    observation: str
    action: str
    result: str | None = None  # what the action returned (SearchMemory: the retrieved passages)


@dataclass
class PromptContext:
    task: str
    observation: str
    history: Sequence[HistoryStep]
    step: int  # steps taken so far in this episode
    history_length: int
    admissible_actions: Sequence[str] | None = None
    require_think: bool = False
    image_mode: bool = False  # the observation is (also) given as an image
    extra: Mapping[str, Any] = field(default_factory=dict)  # the environment's info dict


def history_block(ctx: PromptContext) -> str:
    """The last steps as lines "[Step k] Observation: ... / Action: ...", or "" when there are none."""
    if not ctx.history:
        return ""
    lines = [
        f"Before this step you took {ctx.step} step(s). Your last {len(ctx.history)} observation(s) and action(s):"
    ]
    for h in ctx.history:
        seen = f"Observation:\n{h.observation}\n" if h.observation else ""
        result = f"\nResult:\n{h.result}" if h.result is not None else ""
        lines.append(f"[Step {h.step + 1}] {seen}Action: {h.action}{result}")
    return "\n".join(lines)


def answer_format(ctx: PromptContext, action_hint: str) -> str:
    """The response format instruction; ``<think>`` is asked for but only required with require_think."""
    think = (
        "First reason step by step inside <think> </think> tags (required). "
        if ctx.require_think
        else "You may first reason briefly inside <think> </think> tags. "
    )
    return f"{think}Then give your action inside <action> </action> tags: {action_hint}."


def admissible_block(ctx: PromptContext) -> str:
    if not ctx.admissible_actions:
        return ""
    return "Your admissible actions now are: " + ", ".join(f"'{a}'" for a in ctx.admissible_actions) + "."


def join_sections(*sections: str) -> str:
    return "\n\n".join(s for s in sections if s)

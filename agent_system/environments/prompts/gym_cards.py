"""Gym Cards prompts (NumberLine, EZPoints, Points24, Blackjack): the game's task, the table, history."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, admissible_block, answer_format, history_block, join_sections


def build_prompt(ctx: PromptContext) -> str:
    state = "The current table is shown in the image." if ctx.image_mode else f"Current state:\n{ctx.observation}"
    hint = "exactly one of " + ", ".join(f"'{a}'" for a in ctx.admissible_actions) if ctx.admissible_actions else "one action"
    return join_sections(ctx.task, history_block(ctx), state, admissible_block(ctx), answer_format(ctx, hint))

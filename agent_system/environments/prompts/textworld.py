"""TextWorld prompt: the game's objective, the latest feedback, recent history and the admissible commands."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, admissible_block, answer_format, history_block, join_sections

INTRO = "You are playing a text adventure game. Reach the objective by typing commands."


def build_prompt(ctx: PromptContext) -> str:
    return join_sections(
        INTRO,
        f"Objective: {ctx.task}" if ctx.task else "",
        history_block(ctx),
        f"You are now at step {ctx.step + 1} and the game says:\n{ctx.observation}",
        admissible_block(ctx),
        answer_format(ctx, "exactly one admissible command"),
    )

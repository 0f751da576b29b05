"""Sokoban prompt: rules, the current grid (or a note that it is given as an image), recent history."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, answer_format, history_block, join_sections

RULES = (
    "You are playing Sokoban. Push every box onto a target. You can push a box but not pull it, "
    "and you cannot push two boxes at once or push a box into a wall.\n"
    "Symbols: # wall, _ floor, O target, X box, √ box on target, P you, S you standing on a target."
)


def build_prompt(ctx: PromptContext) -> str:
    state = "The current state is shown in the image." if ctx.image_mode else f"Current state:\n{ctx.observation}"
    return join_sections(
        RULES,
        history_block(ctx),
        state,
        answer_format(ctx, "exactly one of up, down, left, right"),
    )

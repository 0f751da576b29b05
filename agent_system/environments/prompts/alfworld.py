"""ALFWorld prompt: the household task, the current observation, recent history and the admissible commands."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, admissible_block, answer_format, history_block, join_sections

INTRO = (
    "You are an expert agent operating in the ALFRED embodied household environment. "
    "You move between receptacles, open and close them, take and place objects, and clean, heat or cool "
    "objects with a sink, microwave or fridge."
)


def build_prompt(ctx: PromptContext) -> str:
    return join_sections(
        INTRO,
        f"Your task is to: {ctx.task}" if ctx.task else "",
        history_block(ctx),
        f"You are now at step {ctx.step + 1} and your current observation is:\n{ctx.observation}",
        admissible_block(ctx),
        answer_format(ctx, "exactly one admissible action, written as it appears in the list"),
    )

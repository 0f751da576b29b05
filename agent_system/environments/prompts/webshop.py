"""WebShop prompt: the shopping instruction, the current page, recent history and the admissible actions."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, admissible_block, answer_format, history_block, join_sections

INTRO = (
    "You are an expert autonomous agent shopping on a web store. Search for products with search[<query>] "
    "and navigate with click[<element>]; buy the product (with the right options) that fits the instruction."
)


def build_prompt(ctx: PromptContext) -> str:
    return join_sections(
        INTRO,
        f"Your task is to: {ctx.task}" if ctx.task else "",
        history_block(ctx),
        f"You are now at step {ctx.step + 1} and the current page is:\n{ctx.observation}",
        admissible_block(ctx),
        answer_format(ctx, "exactly one admissible action, e.g. search[red running shoes] or click[buy now]"),
    )

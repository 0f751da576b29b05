"""Search (Search-R1 protocol) prompt: the question, the searches made so far with what they returned, and
the tag protocol (<search>, <information>, <answer>)."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, history_block, join_sections

PROTOCOL = (
    "Answer the given question. You can search a knowledge source as often as you need: write a query "
    "between <search> and </search> and the top results come back between <information> and </information>. "
    "When you know the answer, give it between <answer> and </answer>, as a short phrase with no explanation, "
    "for example <answer> Beijing </answer>."
)


def build_prompt(ctx: PromptContext) -> str:
    think = (
        "First reason inside <think> </think> tags (required), then write exactly one <search> or <answer> block."
        if ctx.require_think
        else "You may reason inside <think> </think> tags first; then write exactly one <search> or <answer> block."
    )
    # SearchMemory already shows each step's result; the latest one is repeated only without history
    shown = bool(ctx.history) and ctx.history[-1].result is not None
    current = "" if ctx.step == 0 or shown else f"Latest result:\n{ctx.observation}"
    return join_sections(PROTOCOL, f"Question: {ctx.task}", history_block(ctx), current, think)

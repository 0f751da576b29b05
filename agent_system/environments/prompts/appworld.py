"""AppWorld prompt: the supervisor's task, the outputs of the code run so far, and the code protocol."""

from __future__ import annotations

from agent_system.environments.prompts.common import PromptContext, answer_format, history_block, join_sections

PROTOCOL = (
    "You are a coding agent acting for a supervisor in a world of apps. Write Python code that calls the "
    "apps' APIs as apis.<app>.<api>(...); you see what your code prints. When the task is done, call "
    "apis.supervisor.complete_task(answer=...) (answer only for questions)."
)


def build_prompt(ctx: PromptContext) -> str:
    return join_sections(
        PROTOCOL,
        f"Task: {ctx.task}" if ctx.task else "",
        history_block(ctx),
        f"Latest output:\n{ctx.observation}" if ctx.step else f"Start:\n{ctx.observation}",
        answer_format(ctx, "Python code to run next"),
    )

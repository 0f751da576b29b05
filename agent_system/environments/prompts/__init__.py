"""Prompt templates, one module per environment, each exposing ``build_prompt(ctx: PromptContext) -> str``."""

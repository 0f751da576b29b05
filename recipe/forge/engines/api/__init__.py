"""Prompt-only mode (``trainer.engine=api``): rollout and library evolution against a chat endpoint, no updates."""

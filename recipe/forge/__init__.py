"""SLEA-RL (formerly FORGE): step-level experience augmented RL for multi-turn LLM agents."""

__version__ = "0.1.0"

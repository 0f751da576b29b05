"""Engine-agnostic agent side of SLEA-RL: environments, prompts, memory, projection and the rollout loop.

This package never imports ``recipe``: the rollout takes an optional experience provider and step
observer instead (docs/architecture.md).
"""

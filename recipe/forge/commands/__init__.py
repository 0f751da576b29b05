"""The commands beside training (``slea-rl eval``, ``slea-rl export``, ``slea-rl-library``,
``slea-rl-trajectories``): each stands on the shared rooms (recipe/forge/runs, recipe/forge/hf,
recipe/forge/experience), never on another command."""

"""``slea-rl eval CHECKPOINT`` (also ``python -m recipe.forge.commands.eval``): a checkpoint's figures on held-out
tasks (evaluate.py). Modules: ``sources`` (what a checkpoint folder is), ``evaluate`` (the passes and the command
line), ``stats`` (avg@k, pass@k and their intervals), ``report`` (evaluation.json / .md and the console table)."""

"""``python -m recipe.forge.commands.eval CHECKPOINT [options] [hydra overrides]``: the same as ``slea-rl eval``."""

import sys

from recipe.forge.commands.eval.evaluate import main

sys.exit(main())

"""``python -m recipe.forge.commands.export CHECKPOINT --out FOLDER``: the same as ``slea-rl export``."""

import sys

from recipe.forge.commands.export.cli import main

sys.exit(main())

"""``python -m recipe.forge.export CHECKPOINT --out FOLDER``: the same as ``slea-rl export``."""

import sys

from recipe.forge.export.cli import main

sys.exit(main())

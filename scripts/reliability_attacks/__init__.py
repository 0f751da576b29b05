"""The attacks of scripts/reliability_report.py added by issue 23, one module per area (each returns counts), and
what they share: the repository root and the shipped config, composed as a user's command line composes it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(REPO / "recipe" / "forge" / "config")


def compose_shipped(overrides: list[str] = ()):
    """The shipped config (verl's defaults on the search path) with ``overrides``."""
    from hydra import compose, initialize_config_dir

    from recipe.forge.main_forge import verl_config_searchpath

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="forge_trainer",
                       overrides=list(overrides) + [f"hydra.searchpath=[{verl_config_searchpath()}]"])

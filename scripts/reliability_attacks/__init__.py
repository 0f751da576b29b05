"""The attacks of scripts/reliability_report.py added by issue 23, one module per area (each returns counts), and
what they share: the repository root and the shipped config, composed as a user's command line composes it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def compose_shipped(overrides: list[str] = ()):
    """The shipped config (verl's defaults on the search path) with ``overrides``."""
    from recipe.forge.run_config import compose_config

    return compose_config(list(overrides))

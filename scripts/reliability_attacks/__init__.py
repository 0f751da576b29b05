"""The attacks of scripts/reliability_report.py added since issue 23, one module per area (each returns counts),
and what they share: the repository root, the shipped config composed as a user's command line composes it, and
the :class:`Attack` record the report lists (its counts, its "caught" condition, the totals it feeds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


def compose_shipped(overrides: list[str] = ()):
    """The shipped config (verl's defaults on the search path) with ``overrides``."""
    from recipe.forge.run_config import compose_config

    return compose_config(list(overrides))


# what every attack's counts add up to in the report's totals (the goal of issue 35: each of them 0)
TOTALS = ("code_ran", "secrets_sent_or_written", "runs_lost_or_mistaken", "tracebacks", "processes_left", "hangs")


@dataclass(frozen=True)
class Attack:
    """One attack of scripts/reliability_report.py. ``run(quick)`` returns its counts (names unique across the
    report); ``caught(counts)`` says whether every fault it made was caught; ``totals`` names, for each of
    :data:`TOTALS` it feeds, its counts that add into that total. Adding an attack to the report is adding one
    of these to its list (reliability_report.ATTACKS)."""

    run: Callable[[bool], dict]
    caught: Callable[[dict], bool]
    totals: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.run.__name__


def add_totals(result: dict, attacks: list[Attack]) -> dict:
    """``total_<name>`` for each of :data:`TOTALS`: the sum of the counts the attacks name for it."""
    for total in TOTALS:
        result[f"total_{total}"] = sum(int(result.get(key, 0)) for attack in attacks
                                       for key in attack.totals.get(total, ()))
    return result


def clean_refusal(err: str) -> bool:
    """Whether a refused command's stderr says why in lines of its own (the error last), never a traceback."""
    return bool(err.strip()) and "Traceback" not in err

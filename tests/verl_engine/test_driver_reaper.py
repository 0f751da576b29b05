"""The watchdog's process bookkeeping (recipe/forge/engines/verl/reaper.py) on a hand-made process table.

The real attack (a driver that runs ``ray.init`` and an actor, SIGKILLed, every process below it waited for:
agent_system/testing/ray_driver.py) is run by tests/foundation/test_reliability_report.py. Without the watchdog
a SIGKILLed driver left its local Ray cluster running (39 processes after one verl CPU run; with only
``ray.init`` and an actor, the dashboard and runtime-env agents)."""

from __future__ import annotations

from recipe.forge.engines.verl.reaper import alive, descendants


def test_descendants_and_alive_on_a_hand_made_table():
    # pid -> (parent, start time): 1 <- 10 <- {11, 12 <- 13}; 20 is someone else's
    table = {1: (0, 1), 10: (1, 100), 11: (10, 101), 12: (10, 102), 13: (12, 103), 20: (1, 104)}
    assert descendants(table, {10}) == {(11, 101), (12, 102), (13, 103)}
    assert descendants(table, {12}) == {(13, 103)} and descendants(table, {99}) == set()
    # pid 12 reused by a later process (another start time) is not the recorded one
    assert alive({(12, 102), (11, 101), (77, 5)}, {**table, 12: (1, 999)}) == {(11, 101)}

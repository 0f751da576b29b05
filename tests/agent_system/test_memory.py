"""Memories: what they keep and return, and the env.memory switch."""

from __future__ import annotations

import pytest

from agent_system.memory import NoMemory, SearchMemory, SimpleMemory, make_memory


def fill(memory, steps):
    for k in range(steps):
        memory.store([0, 2], [f"obs{k}-a", f"obs{k}-c"], [f"act{k}-a", f"act{k}-c"], [f"res{k}-a", f"res{k}-c"])


def test_simple_memory_keeps_the_last_pairs_per_environment():
    m = SimpleMemory(3)
    fill(m, 4)
    a, b, c = m.fetch([0, 1, 2], history_length=2)
    assert [(h.step, h.observation, h.action) for h in a] == [(2, "obs2-a", "act2-a"), (3, "obs3-a", "act3-a")]
    assert b == [] and [h.action for h in c] == ["act2-c", "act3-c"]
    assert m.fetch([0], 0) == [[]] and len(m.fetch([0], 10)[0]) == 4
    m.reset(3)
    assert m.fetch([0], 2) == [[]]


def test_search_memory_keeps_queries_and_results():
    m = SearchMemory(3)
    fill(m, 3)
    (a,) = m.fetch([2], history_length=1)
    assert [(h.observation, h.action, h.result) for h in a] == [("", "act2-c", "res2-c")]


def test_make_memory_resolves_the_config_switch():
    assert isinstance(make_memory("simple", 2), SimpleMemory)
    assert isinstance(make_memory("simple", 2, default_kind="search"), SearchMemory)
    assert isinstance(make_memory("search", 2), SearchMemory)
    none = make_memory("none", 2)
    assert isinstance(none, NoMemory)
    fill(none, 2)
    assert none.fetch([0], 2) == [[]]
    with pytest.raises(ValueError, match="env.memory"):
        make_memory("vector", 2)

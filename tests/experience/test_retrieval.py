"""Retrieval modes, the fallback and its links, warm-up gates, and rendering under a token cap."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.library import GOLDEN, WARNING, Candidate, ExperienceLibrary
from recipe.forge.experience.render import ExperienceRenderer
from recipe.forge.experience.retrieval import Retriever, gates_open

FRIDGE = "You arrive at fridge 1. The fridge 1 is closed."
FRIDGE2 = "You arrive at fridge 2. The fridge 2 is closed."
DESK = "You arrive at desk 1. On the desk 1, you see a pen 2, and a laptop 1."


def lib_with(*specs):
    lib = ExperienceLibrary(golden_capacity=10, warning_capacity=10, novelty_threshold=0.99)
    for text, zone, level, score, key, task, clusters in specs:
        lib.admit(Candidate(text=text, zone=zone, level=level, score=score, key=key, task=task,
                            cluster_ids=list(clusters)), 0)
    return lib


SPECS = [
    ("open the fridge first", GOLDEN, "method", 3.0, FRIDGE, "cool some apple and put it in fridge.", [0]),
    ("cool items in the fridge", GOLDEN, "principle", 5.0, FRIDGE, "cool some apple and put it in fridge.", [0]),
    ("the fridge is a receptacle", GOLDEN, "example", 1.0, FRIDGE, "cool some apple and put it in fridge.", [0]),
    ("do not look repeatedly", WARNING, "pattern", 2.0, FRIDGE, "cool some apple and put it in fridge.", [0]),
    ("turn on the desklamp", GOLDEN, "method", 4.0, DESK, "look at pen under the desklamp.", []),
    ("do not take the laptop", WARNING, "mistake", 1.0, DESK, "look at pen under the desklamp.", []),
]


def test_clustered_mode_uses_the_cluster_pool_only():
    r = Retriever(lib_with(*SPECS), "clustered", top_k_golden=2, top_k_warning=1)
    got = r.retrieve(FRIDGE, "anything", 0)
    assert [e.text for e in got.entries] == ["cool items in the fridge", "open the fridge first",
                                             "do not look repeatedly"]
    assert not got.fallback
    assert r.retrieve(DESK, "anything", 99).entries == []


def test_observation_mode_falls_back_to_the_whole_library_above_the_threshold():
    r = Retriever(lib_with(*SPECS), "observation", top_k_golden=2, top_k_warning=1, threshold=0.85)
    pooled = r.retrieve(FRIDGE2, "x", 0)  # cluster 0 has entries: no fallback
    assert not pooled.fallback and len(pooled.entries) == 3
    desk_like = "You arrive at desk 1. On the desk 1, you see a pen 3, and a laptop 1."
    found = r.retrieve(desk_like, "x", 42)  # cluster 42 has nothing: fallback by key similarity
    assert found.fallback
    assert [e.text for e in found.entries] == ["turn on the desklamp", "do not take the laptop"]
    assert r.retrieve("Nothing happens.", "x", 43).entries == []  # below the threshold: nothing


def test_task_and_hybrid_modes():
    lib = lib_with(*SPECS)
    task = Retriever(lib, "task", top_k_golden=1, top_k_warning=1)
    got = task.retrieve(DESK, "look at pen under the desklamp!", None)
    assert [e.text for e in got.entries] == ["turn on the desklamp", "do not take the laptop"]
    hybrid = Retriever(lib, "hybrid", top_k_golden=3, top_k_warning=2)
    got = hybrid.retrieve(FRIDGE, "look at pen under the desklamp.", 0)
    texts = [e.text for e in got.entries]
    assert texts[:3] == ["cool items in the fridge", "open the fridge first", "the fridge is a receptacle"]
    assert texts[3:] == ["do not look repeatedly", "do not take the laptop"]  # warning zone topped up by task


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4), st.integers(0, 4), st.sampled_from(["observation", "task", "hybrid", "clustered"]),
       st.sampled_from([FRIDGE, FRIDGE2, DESK, "Nothing happens."]), st.sampled_from([0, 1, None]))
def test_never_more_than_top_k(kg, kw, mode, obs, cluster):
    r = Retriever(lib_with(*SPECS), mode, top_k_golden=kg, top_k_warning=kw, threshold=0.5)
    got = r.retrieve(obs, "cool some apple and put it in fridge.", cluster).entries
    assert sum(e.zone == GOLDEN for e in got) <= kg and sum(e.zone == WARNING for e in got) <= kw
    assert len({e.entry_id for e in got}) == len(got)


def test_gates():
    assert not gates_open(4, 100, warmup_iterations=5, min_library_size=10)
    assert not gates_open(5, 10, warmup_iterations=5, min_library_size=10)
    assert gates_open(5, 11, warmup_iterations=5, min_library_size=10)
    assert not gates_open(0, 0, warmup_iterations=0, min_library_size=0)  # an empty library injects nothing


def query(obs, step=0, task="cool some apple and put it in fridge."):
    return StepQuery(anchor_obs=obs, task=task, task_type="pick_cool_then_place", uid="u", traj_uid="t", step=step)


def test_system_warm_up_clusters_but_injects_nothing(cfg, traj):
    system = ExperienceSystem.from_config(cfg(warmup_iterations=2, min_library_size=1))
    system.begin_iteration(0)
    out = system.provider.provide([query(FRIDGE), query(FRIDGE2, 1), query(DESK, 2)])
    assert [o.cluster_id for o in out] == [0, 0, 1] and all(o.text == "" for o in out)
    t = traj("u", "t", "cool some apple and put it in fridge.", [(FRIDGE, "open fridge 1"), (DESK, "cool x")],
             10.0, clusters=[0, 1])
    system.evolve([t], 0)
    assert len(system.library) > 0
    system.begin_iteration(1)  # library is big enough but still warming up
    assert all(o.text == "" for o in system.provide([query(FRIDGE)]))
    system.begin_iteration(2)
    assert system.provide([query(FRIDGE)])[0].text != ""


def test_a_fallback_find_is_linked_at_once_so_the_clusters_next_step_gets_it(cfg):
    """The repro: entry key k, sim(a, k) = sim(a, b) = 0.85, sim(b, k) = 0.70. a founds a cluster with no
    links and the fallback finds the entry; b joins a's cluster and, too far from k for the fallback, gets the
    entry through the link, in the same iteration."""
    from recipe.forge.experience.similarity import sequence_similarity

    k, a, b = "a" * 20, "a" * 17 + "bbb", "a" * 14 + "b" * 6
    assert [sequence_similarity(*p) for p in ((a, k), (a, b), (b, k))] == pytest.approx([0.85, 0.85, 0.70])
    system = ExperienceSystem.from_config(cfg(min_library_size=0, top_k_warning=0, obs_similarity_threshold=0.85))
    system.library.admit(Candidate(text="turn the dial", zone=GOLDEN, level="method", score=3.0, key=k, task="x"), 0)
    system.begin_iteration(1)
    worker = ExperienceSystem.from_snapshot(system.snapshot())  # a distributed rollout worker's view
    for provider in (system.provider, worker.provider):
        [first] = provider.provide([query(a)])
        provider.shown([query(a)], [first])  # the step shows the entry: the prompt rule kept it
        [second] = provider.provide([query(b, 1)])
        assert first.cluster_id == second.cluster_id and first.fallback and not second.fallback
        assert first.entry_ids == second.entry_ids == ("0",)


def test_fallback_links_reach_the_cluster_and_counts_come_through_evolve(cfg, traj):
    system = ExperienceSystem.from_config(cfg(min_library_size=0, top_k_golden=2, top_k_warning=0))
    system.library.admit(Candidate(text="open the fridge before cooling", zone=GOLDEN, level="method", score=3.0,
                                   key=FRIDGE, task="x"), 0)
    system.begin_iteration(1)
    first = system.provide([query(FRIDGE2)])[0]  # new cluster, no links: fallback finds the entry
    assert first.entry_ids == ("0",) and first.fallback
    assert system.library.entries[0].cluster_ids == []  # not linked before the step is known to show it
    system.provider.shown([query(FRIDGE2)], [first])
    assert system.library.entries[0].cluster_ids == [first.cluster_id]  # linked at once
    assert system.library.entries[0].retrieval_count == 0  # counted when evolve absorbs the step
    t = traj("u", "t", "x", [(FRIDGE2, "look")], 0.0, clusters=[first.cluster_id])
    t.steps[0].experience_ids, t.steps[0].experience_fallback = first.entry_ids, True
    metrics = system.evolve([t], 1)
    assert first.cluster_id in system.library.entries[0].cluster_ids
    assert system.library.entries[0].retrieval_count == 1
    assert metrics["forge/provider_queries"] == metrics["forge/provider_fallback_rate"] == 1.0
    system.begin_iteration(2)
    again = system.provide([query(FRIDGE2)])[0]
    assert again.cluster_id == first.cluster_id and "0" in again.entry_ids and not again.fallback


def test_only_what_a_step_shows_and_trains_on_is_linked(cfg, traj):
    """The fidelity repro: one entry keyed "fridge 1", a step at "fridge 2" (a new cluster) that the fallback finds
    it for. Dropped by the prompt-length rule, the entry is linked to nothing and the episode is no "visited, not
    shown" episode of it (the verl driver's result, which links from the rows); shown in a task group that
    dynamic sampling drops, it is linked for the rest of the iteration but not kept. Before, ``provide`` linked it
    at once and evolve kept the link: cluster_ids [cluster], unshown_episodes 1."""
    import dataclasses

    from agent_system.multi_turn_rollout.prompt_fit import without_last_entries

    system = ExperienceSystem.from_config(cfg(min_library_size=0, top_k_golden=1, top_k_warning=0))
    system.library.admit(Candidate(text="open the fridge before cooling", zone=GOLDEN, level="method", score=3.0,
                                   key=FRIDGE, task="x"), 0)
    entry = system.library.entries[0]
    system.begin_iteration(1)
    [found] = system.provide([query(FRIDGE2)])
    assert found.fallback and found.entry_ids == ("0",)
    trimmed = without_last_entries(found, 1)  # what the prompt-length rule leaves: no entry
    system.provider.shown([query(FRIDGE2)], [trimmed])
    assert entry.cluster_ids == []
    kept = traj("u", "u-0", "x", [(FRIDGE2, "look")], 0.0, clusters=[found.cluster_id])
    system.evolve([kept], 1)
    assert entry.cluster_ids == [] and (entry.unshown_episodes, entry.shown_episodes) == (0, 0)

    system.begin_iteration(2)
    [found] = system.provide([query(FRIDGE2, task="y")])
    assert found.fallback and found.entry_ids == ("0",)
    system.provider.shown([query(FRIDGE2, task="y")], [found])  # shown, in a group dynamic sampling then drops
    assert entry.cluster_ids == [found.cluster_id]  # the iteration's later steps of the cluster get it
    other = dataclasses.replace(query(DESK), uid="v", traj_uid="v-0")
    [desk] = system.provide([other])
    system.evolve([traj("v", "v-0", "x", [(DESK, "look")], 0.0, clusters=[desk.cluster_id])], 2)
    assert entry.cluster_ids == [] and (entry.unshown_episodes, entry.shown_episodes) == (0, 0)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from recipe.forge.experience.embeddings import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir("all-MiniLM-L6-v2"), local_files_only=True)


@pytest.mark.parametrize("limit", [5, 12, 30, 400])
@pytest.mark.parametrize("style", ["compact", "verbose"])
@pytest.mark.parametrize("lesson_style", ["descriptive", "imperative"])
def test_render_respects_the_token_cap(tokenizer, limit, style, lesson_style):
    entries = list(lib_with(*SPECS).all_entries())
    renderer = ExperienceRenderer(limit, style, tokenizer, lesson_style)
    text, shown = renderer.render(entries)
    assert len(tokenizer.encode(text, add_special_tokens=False)) <= limit
    assert list(shown) == [e.entry_id for e in entries][: len(shown)]
    if limit == 400:
        assert len(shown) == len(entries)
        for e in entries:
            assert e.text in text
        if style == "verbose":
            assert "[golden/method score=3.00 support=1]" in text
        elif lesson_style == "descriptive":
            assert "Worked: open the fridge first" in text and "Failed: do not look repeatedly" in text
        else:
            assert "Do: open the fridge first" in text and "Warning: do not look repeatedly" in text


@pytest.mark.parametrize("lesson_style", ["descriptive", "imperative"])
def test_compact_marks_are_no_action_symbols(lesson_style):
    """The compact marks once were "+" (golden) and "!" (warning): "+" is a NumberLine action, so every injected
    message added that action to the prompt whatever its lessons said. Only the entries' own text may."""
    entries = list(lib_with(*SPECS).all_entries())
    text, _ = ExperienceRenderer(400, "compact", None, lesson_style).render(entries)
    for symbol in ("+", "-", "!"):
        assert symbol not in text


def test_render_without_tokenizer_counts_words_and_empty_gives_nothing():
    renderer = ExperienceRenderer(10, "compact")
    entries = list(lib_with(*SPECS).all_entries())
    text, shown = renderer.render(entries)
    assert len(text.split()) <= 10 and shown
    assert renderer.render([]) == ("", ())
    with pytest.raises(ValueError, match="experience_style"):
        ExperienceRenderer(10, "fancy")
    with pytest.raises(ValueError, match="lesson_style='bossy' is not one of"):
        ExperienceRenderer(10, "compact", lesson_style="bossy")

"""Size limits (recipe/forge/experience/bounds.py, issue 23 item 3): a huge answer, observation or task never makes
a huge lesson, prompt, prototype or library file, and observations of normal size cluster exactly as before."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.config_schema import ForgeConfig
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.bounds import MAX_KEY_CHARS, MAX_LESSON_CHARS, bounded_key
from recipe.forge.experience.extract_credit import CreditExtractor
from recipe.forge.experience.extract_llm import LLMExtractor
from recipe.forge.experience.extract_oracle import OracleExtractor
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.index import ObservationIndex
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate, ExperienceEntry, ExperienceLibrary
from recipe.forge.experience.render import WORD_CHARS, ExperienceRenderer
from recipe.forge.experience.similarity import sequence_similarity
from recipe.forge.experience.store import checkpoint_path

HUGE = 100_000
ACTION = "x" * HUGE  # a one-word answer of 100,000 characters
OTHER = "y" * HUGE
OBS = "You are in the middle of a room. " + "o" * HUGE
TASK = "put a clean mug in the coffeemachine " * (HUGE // 36)
KIND = "k" * HUGE


def huge_batch(make_traj):
    """Trajectories whose every quotable field is huge: a won episode (golden levels), a failed one with invalid
    answers and a loop (mistake: the habit; pattern; diagnostic), a failed one without (mistake: the plan shape),
    a huge answer tag, huge admissible actions and a huge expert action."""
    admissible = (OTHER, "go")
    won = make_traj("u", "won", TASK, [(OBS, ACTION)], 1.0, task_type=KIND, admissible=admissible,
                    clusters=[0], experts=[ACTION])
    looped = make_traj("u", "looped", TASK, [(OBS, ACTION), (OBS, ACTION), (OBS + "!", ACTION)], 0.0,
                       task_type=KIND, valid=[False, True, True], admissible=admissible, clusters=[0, 0, 1],
                       experts=[OTHER] * 3)
    plain = make_traj("u", "plain", TASK, [(OBS, OTHER), (OBS + "?", ACTION)], 0.0, task_type=KIND,
                      admissible=admissible, clusters=[0, 2], experts=[ACTION, ACTION])
    tag = "t" * HUGE
    plain.steps[1].response_text = f"<{tag}>{ACTION}</{tag}>"
    return [won, looped, plain]


def extractors(style, make_traj):
    batch = huge_batch(make_traj)
    rule = RuleExtractor(style)
    yield "rule", rule.extract(batch[:1], batch[1:], 0.5, batch=batch)
    credit = CreditExtractor(RuleExtractor(style), style, 0.95, 0.1)
    yield "credit", credit.extract(batch[:1], batch[1:], 0.5, batch=batch)
    yield "oracle", OracleExtractor(style).extract([], [], 0.5, batch=batch)
    prompts = []

    def llm(prompt):
        prompts.append(prompt)
        return json.dumps([{"level": level, "text": "use the sink before the coffeemachine"}
                           for zone in (GOLDEN, WARNING) for level in LEVELS[zone]])

    candidates = LLMExtractor(llm).extract(batch[:1], batch[1:], 0.5, batch=batch)
    assert prompts and max(map(len, prompts)) < 5_000  # the prompt quotes the task and the steps bounded
    yield "llm", candidates


@pytest.mark.parametrize("style", ["descriptive", "imperative"])
def test_a_huge_answer_gives_bounded_lessons_at_every_level_from_every_extractor(style, traj):
    levels = set()
    for name, candidates in extractors(style, traj):
        assert candidates, name
        for c in candidates:
            levels.add(c.level)
            assert len(c.text) <= MAX_LESSON_CHARS, (name, c.level, len(c.text))  # every quote is cut
        library = ExperienceLibrary(novelty_threshold=1.0)
        for c in candidates:
            library.admit(c, 0)
        for entry in library.all_entries():  # what is stored (and saved) is bounded too
            fields = [entry.key, entry.task, entry.task_type]
            if entry.advice is not None:
                fields += [entry.advice.state, *entry.advice.do, *entry.advice.avoid, entry.advice.expert or ""]
            assert max(map(len, fields)) <= MAX_KEY_CHARS, (name, entry.level)
    assert levels == set(LEVELS[GOLDEN]) | set(LEVELS[WARNING])


def test_a_lesson_longer_than_max_lesson_chars_is_cut_at_admission():
    library = ExperienceLibrary(max_lesson_chars=50)
    _, entry_id = library.admit(Candidate(text="take the mug " * 100, zone=GOLDEN, level="method", score=1.0), 0)
    text = library.entries[entry_id].text
    assert len(text) == 50 and text.endswith("...") and text.startswith("take the mug take")
    with pytest.raises(ConfigError, match="algorithm.forge.max_lesson_chars"):
        ForgeConfig(max_lesson_chars=10)
    with pytest.raises(ConfigError, match="algorithm.forge.max_key_chars"):
        ForgeConfig(max_key_chars=100)


def test_a_5mb_observation_is_clustered_and_stored_as_a_bounded_key():
    page = " ".join(synthetic.corpus(40, seed=5))
    big = page * (5_000_000 // len(page) + 1)
    changed = big[:-1] + "#"  # differs in its last character only
    index = ObservationIndex()
    first = index.assign(big, 0)
    assert len(index.prototype(first)) == len(index.key(big)) == MAX_KEY_CHARS  # what a comparison reads
    assert index.prototype(first).startswith(page[:1000])
    assert index.assign(big, 0) == first  # the same observation: the same key, the same cluster
    assert index.key(changed) != index.key(big) and index.assign(changed, 0) == first  # close: joins
    exact = ObservationIndex(exact=True)
    assert exact.assign(big, 0) != exact.assign(changed, 0)  # exact mode: different texts, different clusters
    assert exact.assign(big, 0) == 0


def test_a_saved_index_or_library_with_huge_texts_is_loaded_bounded():
    state = ObservationIndex().state_dict()
    state["clusters"] = [{"cluster_id": 0, "prototype": OBS, "uses": 1, "created_iter": 0, "last_used_iter": 0}]
    state["next_id"] = 1
    index = ObservationIndex.from_state(state)
    assert index.prototype(0) == bounded_key(OBS) and index.assign(OBS, 1) == 0
    library = ExperienceLibrary()
    saved = library.state_dict()
    saved["entries"] = [vars(ExperienceEntry(0, ACTION, GOLDEN, "method", 1.0, TASK, None, OBS, [0]))]
    saved["next_id"] = 1
    entry = ExperienceLibrary.from_state(saved).entries[0]
    assert len(entry.text) == MAX_LESSON_CHARS and len(entry.key) == len(entry.task) == MAX_KEY_CHARS


def system(**overrides):
    return ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0, library_save_freq=1000,
                                                    checkpoint_dir="unused", **overrides))


def test_huge_observations_and_answers_keep_prompts_and_the_library_file_small(tmp_path, traj):
    forge = system()
    observations = [f"Room {i}. " + "w" * 1_000_000 for i in range(3)]
    trajectories = []
    for i, obs in enumerate(observations):
        got = forge.provide([StepQuery(obs, TASK, KIND, "u", f"t{i}", 0)])[0]
        t = traj("u", f"t{i}", TASK, [(obs, ACTION)], float(i % 2), task_type=KIND, clusters=[got.cluster_id])
        trajectories.append(t)
    forge.evolve(trajectories, 0)
    assert len(forge.library) > 0
    shown = forge.provide([StepQuery(observations[1], TASK, KIND, "u", "t9", 0)])[0]
    assert shown.entry_ids and len(shown.text) <= 3 * (MAX_LESSON_CHARS + 10) + 60
    size = checkpoint_path(forge.save(tmp_path).parent).stat().st_size
    # 3 MB of observations, 100 KB answers and tasks: at most a few keys per entry and cluster are stored
    assert size < (len(forge.index) + 6 * len(forge.library)) * MAX_KEY_CHARS + 20_000 < 1_000_000


def test_the_rendered_block_never_exceeds_max_experience_length_without_a_tokenizer():
    entries = [ExperienceEntry(i, text, GOLDEN, "method", 1.0, "", None, "", [])
               for i, text in enumerate(["open the fridge", ACTION, "w " * HUGE])]
    for limit in (5, 40, 800):
        renderer = ExperienceRenderer(limit, "compact")
        text, shown = renderer.render(entries)
        assert renderer.count(text) <= limit and len(text) <= limit * (WORD_CHARS + 1) and shown
        assert renderer.count(renderer.truncate(ACTION, limit)) == limit


def test_normal_observations_keep_their_words_as_tokens():
    renderer = ExperienceRenderer(800, "compact")
    assert renderer.count("go to countertop 1, then take mug 1 from the countertop") == 11
    assert renderer.count("a" * WORD_CHARS + " " + "b" * (WORD_CHARS + 1)) == 3


def test_every_synthetic_observation_is_its_own_key():
    corpus = synthetic.corpus(300, seed=3)
    assert max(map(len, corpus)) < MAX_KEY_CHARS
    index = ObservationIndex()
    assert all(index.key(obs) == obs for obs in corpus)


TEXTS = st.text(alphabet="ab c1", min_size=0, max_size=300)


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=12), st.sampled_from([0.6, 0.85, 1.0]))
def test_below_the_bound_clustering_is_exactly_the_unbounded_similaritys(observations, threshold):
    """Observations of at most ``max_key_chars`` characters are their own keys: the bounded index assigns them
    exactly as an index without the bound, and the key similarity is the raw one."""
    bounded = ObservationIndex(threshold, max_key_chars=300)
    unbounded = ObservationIndex(threshold, max_key_chars=10**9)
    assert bounded.assign_batch(observations, 0) == unbounded.assign_batch(observations, 0)
    for a in observations:
        for b in observations[:3]:
            assert sequence_similarity(bounded.key(a), bounded.key(b)) == sequence_similarity(a, b)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=2_000), st.integers(256, 1_000))
def test_a_key_is_bounded_idempotent_and_the_text_itself_when_short(text, limit):
    key = bounded_key(text, limit)
    assert len(key) <= limit and bounded_key(key, limit) == key
    assert (key == text) == (len(text) <= limit)

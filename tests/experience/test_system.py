"""ExperienceSystem as the engines use it: provider protocol, snapshots for workers, metrics, embeddings."""

import json
import pickle

import numpy as np
import pytest

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.experience import ExperienceSystem, LibrarySnapshot
from recipe.forge.experience.library import GOLDEN, Candidate
from recipe.forge.experience.system import PROVISIONAL_BASE

FRIDGE = "You arrive at fridge 1. The fridge 1 is closed."
FRIDGE2 = "You arrive at fridge 2. The fridge 2 is closed."
DESK = "You arrive at desk 1. On the desk 1, you see a pen 2, and a laptop 1."


def q(obs, traj_uid="t", step=0):
    return StepQuery(anchor_obs=obs, task="cool some apple and put it in fridge.", task_type="pick_cool_then_place",
                     uid="u", traj_uid=traj_uid, step=step)


def trained(cfg, iterate, **kw):
    system = ExperienceSystem.from_config(cfg(min_library_size=1, warmup_iterations=1, **kw))
    for i in range(3):
        iterate(system, i, seed=40 + i)
    return system


def test_from_config_keeps_the_typed_section_and_reads_a_plain_mapping_as_one(cfg):
    from dataclasses import asdict

    from recipe.forge.config_rules import ForgeValues

    typed = cfg()
    a = ExperienceSystem.from_config(typed)
    assert a.cfg is typed  # handed as it is, not flattened
    b = ExperienceSystem.from_config({k: v for k, v in asdict(typed).items() if not k.startswith("_")})
    assert isinstance(b.cfg, ForgeValues) and asdict(b.cfg) == {k: v for k, v in asdict(typed).items()
                                                                if not k.startswith("_")}
    assert ExperienceSystem.from_config({"top_k_golden": 3}).cfg == ForgeValues(top_k_golden=3)  # defaults fill
    with pytest.raises(ValueError, match="unknown key algorithm.forge.top_k_golde"):
        ExperienceSystem.from_config({"top_k_golde": 2})
    with pytest.raises(ValueError, match="top_k_golden=-1"):
        ExperienceSystem.from_config({"top_k_golden": -1})  # a saved config goes through the same checks


def test_injection_and_lesson_style_reach_the_provider_the_extractor_and_snapshots(cfg, traj):
    system = ExperienceSystem.from_config(cfg(injection="user_suffix", lesson_style="imperative", top_k_golden=3))
    win = traj("u", "w", "reach the target.", [("Target: 2\nCurrent: 3", "-")], 1.0)
    system.evolve([win], 0)
    system.begin_iteration(1)
    [found] = system.provide([StepQuery("Target: 2\nCurrent: 3", "reach the target.", None, "u", "t", 0)])
    assert found.placement == "user_suffix"
    assert found.text.startswith("Follow these lessons from past episodes:\nDo: ")
    assert 'At "Target: 2 Current: 3", answer with <action>-</action>.' in found.text
    worker = ExperienceSystem.from_snapshot(system.snapshot())
    assert worker.provide([StepQuery("Target: 2\nCurrent: 3", "", None, "u", "t", 0)])[0].placement == "user_suffix"
    # a library saved before these keys existed resumes with the placement and wording it was built with
    old_config = {k: v for k, v in system.state()["config"].items() if k not in ("injection", "lesson_style")}
    resumed = ExperienceSystem.from_config(old_config)
    assert (resumed.injection, resumed.renderer.lesson_style) == ("system", "descriptive")


def test_snapshot_is_plain_data_and_its_provider_agrees_with_the_driver(cfg, iterate):
    system = trained(cfg, iterate)
    snap = system.snapshot()
    assert snap.version == 3 and isinstance(snap, LibrarySnapshot)
    restored = pickle.loads(pickle.dumps(snap))
    json.dumps(snap.__dict__)  # JSON-ready as well
    worker = ExperienceSystem.from_snapshot(restored)
    protos = [system.index.prototype(c) for c in list(system.index.cluster_ids())[:8]]
    queries = [q(p, step=i) for i, p in enumerate(protos)]
    system.begin_iteration(3)
    worker.begin_iteration(3)
    assert worker.provider.provide(queries) == system.provider.provide(queries)
    assert any(o.text for o in worker.provider.provide(queries))
    with pytest.raises(RuntimeError, match="read-only"):
        worker.evolve([], 3)
    assert len(worker.library) == len(system.library)  # the worker never changes the published library


def test_worker_local_clusters_are_consistent_and_absorbed_by_the_driver(cfg, iterate, traj):
    system = trained(cfg, iterate)
    worker = ExperienceSystem.from_snapshot(system.snapshot())
    new_a = "You open the safe 7. The safe 7 is open. In it, you see a watch 3, and a keychain 2."
    new_b = "You open the safe 7. The safe 7 is open. In it, you see a watch 3, and a keychain 5."
    out = worker.provider.provide([q(new_a), q(new_b, step=1), q(DESK, step=2)])
    assert out[0].cluster_id >= PROVISIONAL_BASE and out[0].cluster_id == out[1].cluster_id
    t = traj("u", "t", "task", [(new_a, "look"), (new_b, "look")], 0.0, clusters=[out[0].cluster_id] * 2)
    n_before = len(system.index)
    system.evolve([t], 3)
    ids = [s.cluster_id for s in t.steps]
    assert ids[0] == ids[1] < PROVISIONAL_BASE and ids[0] in system.index and len(system.index) == n_before + 1


def test_step_group_metrics_describe_the_groups_the_advantage_used_not_the_drivers_clusters(cfg, traj):
    """A worker filed two steps of one task group under one local cluster (the advantage's step group); the driver
    files their observations under two of its own. forge/step_group_* report the worker's group."""
    system = ExperienceSystem.from_config(cfg())
    local = PROVISIONAL_BASE + 3
    t = traj("u", "t", "task", [(FRIDGE, "open fridge 1"), (DESK, "look")], 0.0, clusters=[local, local])
    metrics = system.evolve([t], 0)
    assert (metrics["forge/step_groups"], metrics["forge/step_group_max_size"]) == (1.0, 2.0)
    assert metrics["forge/step_group_singleton_share"] == 0.0
    assert t.steps[0].cluster_id != t.steps[1].cluster_id  # the driver's clusters, for the library


def test_injecting_is_the_gate_the_rollout_ran_under_not_the_next_one(cfg, traj):
    """Warm-up 0, no size gate: iteration 0 ran with an empty library (nothing injected) and evolution fills
    it; forge/injecting says 0 for iteration 0 and 1 for iteration 1, which ran with the filled library."""
    system = ExperienceSystem.from_config(cfg())
    first = system.evolve([traj("u", "t", "task", [(FRIDGE, "open fridge 1")], 1.0)], 0)
    assert len(system.library) > 0 and first["forge/injecting"] == 0.0
    second = system.evolve([traj("u", "t2", "task", [(DESK, "look")], 1.0)], 1)
    assert second["forge/injecting"] == 1.0


def test_metrics_names(cfg, iterate):
    system = trained(cfg, iterate)
    _, metrics = iterate(system, 3, seed=99)
    for key in ("forge/strategies_added", "forge/warnings_added", "forge/library_golden_size",
                "forge/library_warning_size", "forge/library_total_size", "forge/retrieval_hit_rate",
                "forge/experiences_per_step", "forge/cluster_count", "forge/step_group_singleton_share",
                "forge/step_group_mean_size", "forge/step_group_max_size", "forge/library_version"):
        assert isinstance(metrics[key], float), key
    assert metrics["forge/library_total_size"] == metrics["forge/library_golden_size"] + \
        metrics["forge/library_warning_size"] == len(system.library)
    assert 0.0 <= metrics["forge/retrieval_hit_rate"] <= 1.0 and metrics["forge/cluster_count"] == len(system.index)


@pytest.fixture(scope="module")
def embedder():
    from recipe.forge.experience.embeddings import TextEmbedder

    return TextEmbedder("all-MiniLM-L6-v2")


def test_minilm_embeddings_are_normalised_padding_invariant_and_meaningful(embedder):
    texts = ["Open the fridge before taking the apple.", "Open the fridge first, then take the apple out.",
             "The stock market closed lower on Tuesday after a long and volatile trading session."]
    together = embedder(texts)
    assert together.shape == (3, 384) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    embedder._cache.clear()
    alone = np.stack([embedder([t])[0] for t in texts])  # no padding: must match the padded batch
    assert np.allclose(alone, together, atol=1e-5)
    sims = together @ together.T
    assert sims[0, 1] > 0.7 > 0.3 > sims[0, 2]


def test_system_with_embeddings_merges_paraphrases_and_retrieves_by_meaning(cfg, embedder):
    system = ExperienceSystem.from_config(cfg(use_embeddings=True, min_library_size=1, novelty_threshold=0.8,
                                              obs_similarity_threshold=0.6), embedder=embedder)
    add = lambda text, key: system.library.admit(Candidate(text=text, zone=GOLDEN, level="method", score=1.0,
                                                           key=key, task="x"), 0)
    assert add("Open the fridge before taking the apple.", FRIDGE)[0] == "added"
    assert add("Open the fridge first, then take the apple out.", FRIDGE)[0] == "merged"
    assert add("Turn on the desklamp to examine the pen.", DESK)[0] == "added"
    system.begin_iteration(1)
    out = system.provider.provide([q("You walk to the fridge 3. It is shut.")])[0]
    assert out.entry_ids == ("0",)


def test_missing_embedding_model_is_a_clear_error(tmp_path):
    from recipe.forge.experience.embeddings import resolve_model_dir

    with pytest.raises(FileNotFoundError, match="never downloaded"):
        resolve_model_dir(str(tmp_path / "nope"))


def rolled_out(system, seed: int, n_tasks: int = 3, group: int = 4, horizon: int = 4):
    """One iteration's trajectories, rolled out through ``system``'s provider (so steps carry its clusters), not
    yet evolved. Fully determined by ``seed`` and the system's state."""
    import random

    from recipe.forge.experience import synthetic
    from tests.experience.conftest import make_traj

    rng = random.Random(seed)
    system.begin_iteration(1)
    trajectories = []
    for task_i in range(n_tasks):
        task_type, task = synthetic.alfworld_task(rng)
        places = [synthetic.alfworld_observation(rng) for _ in range(horizon)]
        for g in range(group):
            uid, traj_uid = f"task{task_i}", f"task{task_i}-copy{g}"
            steps = []
            for step, obs in enumerate(places[: rng.randint(1, horizon)]):
                [exp] = system.provider.provide([StepQuery(obs, task, task_type, uid, traj_uid, step)])
                steps.append((obs, rng.choice(["go to drawer 1", "take mug 1 from desk 1", "open fridge 1"]), exp))
            t = make_traj(uid, traj_uid, task, [(o, a) for o, a, _ in steps], rng.choice([0.0, 10.0]),
                          task_type=task_type, clusters=[e.cluster_id for _, _, e in steps])
            for record, (_, _, e) in zip(t.steps, steps):
                record.experience_ids = e.entry_ids
            trajectories.append(t)
    return trajectories


@pytest.mark.parametrize("credit", [dict(), dict(lesson_credit="step", step_value="next_state"),
                                    dict(lesson_credit="step", step_value="return")])
def test_the_library_a_batch_makes_does_not_depend_on_the_order_its_episodes_arrive_in(cfg, iterate, credit):
    """verl's agent loop hands the driver its episodes in the order they finished, the embedded engine in its
    environments' order: the same episodes in any order evolve the same library (entries, scores, supports, links,
    outcome counters), with outcome-credited lessons and with step-credited ones (whose outcome fallback picks
    among tied episodes). Cluster ids new to the library may be numbered in another order; their count may not."""
    import random

    from recipe.forge.experience.outcomes import OUTCOME_FIELDS

    def content(system):
        return sorted((e.zone, e.level, e.text, round(e.score, 9), e.support, e.task, len(e.cluster_ids),
                       *(getattr(e, name) for name in OUTCOME_FIELDS)) for e in system.library.entries.values())

    kw = dict(top_k_trajectories=2, **credit)
    for seed in range(5):
        libraries = []
        for order in ("as rolled out", "reversed", "shuffled"):
            system = ExperienceSystem.from_config(cfg(**kw), gamma=0.9, invalid_action_penalty_coef=0.1)
            iterate(system, 0, seed=seed)  # a library to retrieve from: steps get experiences and links
            batch = rolled_out(system, seed=100 + seed)
            if order == "reversed":
                batch = batch[::-1]
            elif order == "shuffled":
                random.Random(seed).shuffle(batch)
            system.evolve(batch, 1)
            libraries.append(content(system))
        assert libraries[0] == libraries[1] == libraries[2], f"seed {seed}"
        assert len(libraries[0]) > 0

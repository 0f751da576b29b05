"""Snapshots that ship the observation search (``snapshot(with_search=True)``): a worker restores the driver's
near-duplicate search instead of re-hashing every prototype, and must answer exactly as a rebuilt one does."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.index import ObservationIndex
from recipe.forge.experience.similarity import LSHParams


def driver_system(cfg, n: int, max_clusters: int, seed: int = 3) -> ExperienceSystem:
    """A driver whose index saw ``n`` observations (near-duplicates included) and, when ``max_clusters < n``,
    evicted clusters along the way (removals are what could make a live search differ from a rebuilt one)."""
    system = ExperienceSystem.from_config(cfg(max_clusters=max_clusters))
    rng = random.Random(seed)
    base = synthetic.corpus(n // 2, seed=seed)
    for i, obs in enumerate(base + [synthetic.perturb(o, rng) for o in base]):
        system.index.assign(obs, iteration=i // 50)
    return system


def queries(system: ExperienceSystem, seed: int) -> list[StepQuery]:
    rng = random.Random(seed)
    protos = [system.index.prototype(c) for c in list(system.index.cluster_ids())[::7]]
    texts = protos + [synthetic.perturb(p, rng) for p in protos] + synthetic.corpus(40, seed=seed + 100)
    return [StepQuery(anchor_obs=t, task="t", task_type=None, uid="u", traj_uid="u-0", step=i) for i, t in enumerate(texts)]


@pytest.mark.parametrize("max_clusters", [10_000, 150], ids=["no-eviction", "with-evictions"])
def test_a_worker_on_the_shipped_search_answers_like_one_that_rebuilt_it(cfg, max_clusters):
    driver = driver_system(cfg, 400, max_clusters)
    assert (driver.index.evicted > 0) == (max_clusters < 400)
    shipped = pickle.loads(pickle.dumps(driver.snapshot(with_search=True)))  # as Ray carries it
    plain = driver.snapshot()
    assert shipped.index_search is not None and plain.index_search is None
    json.dumps(plain.__dict__)  # the default snapshot stays JSON-ready
    fast, rebuilt = ExperienceSystem.from_snapshot(shipped), ExperienceSystem.from_snapshot(plain)
    qs = queries(driver, seed=max_clusters)
    matches = [driver.index.match(q.anchor_obs) for q in qs]
    assert [fast.index.match(q.anchor_obs) for q in qs] == matches == [rebuilt.index.match(q.anchor_obs) for q in qs]
    assert fast.provider.provide(qs) == rebuilt.provider.provide(qs)  # same clusters, worker-local ids included


def test_the_worker_search_is_a_private_copy(cfg):
    driver = driver_system(cfg, 60, 10_000)
    snap = driver.snapshot(with_search=True)
    worker = ExperienceSystem.from_snapshot(snap)
    n_driver = len(driver.index)
    worker.provider.provide([StepQuery("a brand new observation", "t", None, "u", "u-0", 0)])
    assert len(driver.index) == n_driver and driver.index.match("a brand new observation") is None
    assert ExperienceSystem.from_snapshot(snap).index.match("a brand new observation") is None


def test_a_search_of_other_prototypes_is_refused_and_other_lsh_params_rebuild(cfg):
    a, b = driver_system(cfg, 40, 10_000, seed=1), driver_system(cfg, 40, 10_000, seed=2)
    with pytest.raises(ValueError, match="does not hold this state's cluster prototypes"):
        ObservationIndex.from_state(a.index.state_dict(), search_blob=b.index.search_blob())
    other = LSHParams(bands=10, rows=4)
    restored = ObservationIndex.from_state(a.index.state_dict(), lsh=other, search_blob=a.index.search_blob())
    rebuilt = ObservationIndex.from_state(a.index.state_dict(), lsh=other)
    probes = [a.index.prototype(c) for c in a.index.cluster_ids()] + synthetic.corpus(20, seed=9)
    assert [restored.match(p) for p in probes] == [rebuilt.match(p) for p in probes]
    assert restored._search.params == other


def test_a_search_restored_from_read_only_buffers_is_a_private_copy(cfg):
    """Ray hands numpy arrays over as read-only views of its object store: the restored search never writes into
    them, and the worker's own clusters and evictions leave the driver's search as it was."""
    driver = driver_system(cfg, 300, 10_000)
    blob = driver.index.search_blob()
    for value in blob.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    worker = ObservationIndex.from_state(driver.index.state_dict(), search_blob=blob, max_clusters=len(driver.index))
    probes = [driver.index.prototype(c) for c in list(driver.index.cluster_ids())[:40]] + synthetic.corpus(40, seed=4)
    before = [driver.index.match(p) for p in probes]
    assert [worker.match(p) for p in probes] == before
    for obs in synthetic.corpus(120, seed=77):  # new clusters on the worker, each evicting one of the driver's
        worker.assign(obs, iteration=9)
    assert worker.evicted > 0 and len(worker) == len(driver.index)
    assert [driver.index.match(p) for p in probes] == before


def test_a_search_blob_of_another_format_is_a_clear_error(cfg):
    driver = driver_system(cfg, 20, 10_000)
    old_style = [("_text", False, [pickle.dumps({})])]  # the pickled attributes the dict-based index shipped
    with pytest.raises(ValueError, match="format"):
        ObservationIndex.from_state(driver.index.state_dict(), search_blob=old_style)

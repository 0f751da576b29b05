"""Per-entry episode outcomes (recipe/forge/experience/outcomes.py): counted by ``ExperienceSystem.evolve`` from
the training episodes, on the driver's clusters; saved, snapshotted and merged; shown by the viewer and the diff.

The hand-worked library: entries 0, 1 and 2 linked to the clusters of observations A, B and C. Iteration 0's
episodes (success, steps as observation[shown ids]):

    E1 won   A[0] B          shown 0;   visits A, B
    E2 lost  A[0] A[0] C     shown 0 (twice: one episode);   visits A, C
    E3 won   A[99] C         shown nothing (99 is no entry);  visits A, C
    E4 lost  B[1,2]          shown 1 and 2; absorb links 2 to B
    E5 won   A[0]            ended by a fault: counts nothing
    E6 won   B C             B under a worker-local cluster id, C under none: absorb files both under the driver's

So entry 0 (A): shown E1 won, E2 lost -> 1/2; not shown E3 won -> 1/1.
Entry 1 (B): shown E4 lost -> 0/1; not shown E1, E6 won -> 2/2.
Entry 2 (C, and B once E4 is absorbed): shown E4 lost -> 0/1; not shown E1 won, E2 lost, E3 won, E6 won -> 3/4.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.experience import ExperienceSystem, LibrarySnapshot
from recipe.forge.experience.library import Candidate
from recipe.forge.experience.outcomes import OUTCOME_FIELDS
from recipe.forge.experience.store import FILENAME, _canonical, load_payload
from recipe.forge.experience.system import PROVISIONAL_BASE
from recipe.forge.commands.library_viewer import main as viewer_main
from tests.experience.conftest import make_traj

A = "You arrive at fridge 1. The fridge 1 is closed."
B = "You arrive at desk 1. On the desk 1, you see a pen 2, and a laptop 1."
C = "You are in the middle of a room. Looking quickly around you, you see a cabinet 6 and a bed 1."
TASK = "cool some apple and put it in fridge."
LESSONS = ("Lesson linked to the fridge.", "Lesson linked to the desk.", "Lesson linked to the room.")
WON, LOST = 1.0, 0.0
HAND_COUNTS = {0: (2, 1, 1, 1), 1: (1, 0, 2, 2), 2: (1, 0, 4, 3)}  # OUTCOME_FIELDS' order, from the docstring


def clusters_of(system, observations):
    """The system's cluster of each observation (the provider clusters every query)."""
    found = system.provide([StepQuery(obs, TASK, None, "u", "probe", i) for i, obs in enumerate(observations)])
    return [e.cluster_id for e in found]


def episode(name, reward, steps, failure_reason=None):
    """``steps``: (observation, recorded cluster id, shown entry ids) per step."""
    t = make_traj("u", name, TASK, [(obs, "look") for obs, _, _ in steps], reward,
                  clusters=[cid for _, cid, _ in steps], failure_reason=failure_reason)
    for record, (_, _, shown) in zip(t.steps, steps):
        record.experience_ids = tuple(str(i) for i in shown)
    return t


def counts(entry):
    return tuple(getattr(entry, name) for name in OUTCOME_FIELDS)


@pytest.fixture
def hand_worked(cfg):
    """(system after iteration 0 of the docstring's episodes, the cluster ids of A, B, C)."""
    system = ExperienceSystem.from_config(cfg())
    system.begin_iteration(0)
    a, b, c = clusters_of(system, [A, B, C])
    assert len({a, b, c}) == 3
    ids = system.library.insert_unchecked(
        [Candidate(text, "golden", "principle", 1.0, cluster_ids=[cid]) for text, cid in zip(LESSONS, (a, b, c))], 0)
    assert ids == [0, 1, 2]
    trajectories = [
        episode("E1", WON, [(A, a, [0]), (B, b, [])]),
        episode("E2", LOST, [(A, a, [0]), (A, a, [0]), (C, c, [])]),
        episode("E3", WON, [(A, a, [99]), (C, c, [])]),
        episode("E4", LOST, [(B, b, [1, 2])]),
        episode("E5", WON, [(A, a, [0])], failure_reason="worker crashed"),
        episode("E6", WON, [(B, PROVISIONAL_BASE + 7, []), (C, None, [])]),
    ]
    system.evolve(trajectories, 0)
    return system, (a, b, c)


def test_evolve_counts_each_entrys_episodes_shown_it_and_at_its_clusters_not_shown_it(hand_worked):
    system, (a, b, c) = hand_worked
    entries = system.library.entries
    assert {i: counts(entries[i]) for i in HAND_COUNTS} == HAND_COUNTS
    assert entries[2].cluster_ids == [c, b]  # the link absorb made, which put E1 in entry 2's not-shown group
    new = [e for e in system.library.all_entries() if e.entry_id not in HAND_COUNTS]
    assert new and all(counts(e) == (0, 0, 0, 0) for e in new)  # added after the counting: shown to nobody yet


def test_the_counters_grow_with_later_iterations_and_a_merge_keeps_them(hand_worked):
    system, (a, b, c) = hand_worked
    system.begin_iteration(1)
    system.evolve([episode("E7", WON, [(C, c, [2])]), episode("E8", LOST, [(B, b, [])])], 1)
    entries = system.library.entries
    assert counts(entries[2]) == (2, 1, 5, 3)  # E7 shown and won, E8 at B (linked since E4) not shown and lost
    assert counts(entries[1]) == (1, 0, 3, 2)  # E8 at B, not shown, lost; E7 never at B
    assert counts(entries[0]) == HAND_COUNTS[0]  # neither visited A
    before = counts(entries[0])
    support = entries[0].support
    assert system.library.admit(Candidate(LESSONS[0], "golden", "principle", 1.0), 1) == ("merged", 0)
    assert entries[0].support == support + 1 and counts(entries[0]) == before


def test_validation_rollouts_leave_the_counters_as_they_are(hand_worked):
    """Validation rolls out with a snapshot view (recipe/forge/runs/validation.py), which cannot evolve:
    only training batches reach the counters."""
    system, (a, b, c) = hand_worked
    view = ExperienceSystem.from_snapshot(system.snapshot())
    view.begin_iteration(1)
    shown = view.provide([StepQuery(A, TASK, None, "u", "val", 0)])
    assert shown[0].entry_ids  # the view shows lessons
    with pytest.raises(RuntimeError, match="read-only"):
        view.evolve([episode("V1", WON, [(A, a, shown[0].entry_ids)])], 1)
    assert {i: counts(system.library.entries[i]) for i in HAND_COUNTS} == HAND_COUNTS


def test_checkpoints_and_snapshots_carry_the_counters(hand_worked, tmp_path):
    system, _ = hand_worked
    want = {e.entry_id: counts(e) for e in system.library.all_entries()}
    system.save(tmp_path)
    resumed = ExperienceSystem.from_checkpoint(tmp_path)
    assert {e.entry_id: counts(e) for e in resumed.library.all_entries()} == want
    worker = ExperienceSystem.from_snapshot(LibrarySnapshot(**json.loads(json.dumps(system.snapshot().__dict__))))
    assert {e.entry_id: counts(e) for e in worker.library.all_entries()} == want


def _strip_outcomes(folder):
    """Rewrite the checkpoint as a library saved before the counters existed (valid checksum)."""
    document = json.loads((folder / FILENAME).read_text())
    for entry in document["payload"]["library"]["entries"]:
        for name in OUTCOME_FIELDS:
            del entry[name]
    document["sha256"] = hashlib.sha256(_canonical(document["payload"])).hexdigest()
    (folder / FILENAME).write_text(json.dumps(document))


def test_a_library_saved_before_the_counters_loads_with_zeros_and_shows_dashes(hand_worked, tmp_path, capsys):
    system, _ = hand_worked
    system.save(tmp_path)
    _strip_outcomes(tmp_path)
    assert all(name not in e for e in load_payload(tmp_path)["library"]["entries"] for name in OUTCOME_FIELDS)
    resumed = ExperienceSystem.from_checkpoint(tmp_path)
    assert len(resumed.library) == len(system.library)
    assert all(counts(e) == (0, 0, 0, 0) for e in resumed.library.all_entries())
    assert viewer_main([str(tmp_path), "--export-json", str(tmp_path / "v.json")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("shown: -; same clusters, not shown: -; difference: -") == len(system.library)
    rows = [r for levels in json.loads((tmp_path / "v.json").read_text())["zones"].values()
            for level in levels.values() for r in level]
    assert rows and all(tuple(r[name] for name in OUTCOME_FIELDS) == (0, 0, 0, 0) for r in rows)


def test_the_viewer_shows_the_rates_and_their_difference(hand_worked, tmp_path, capsys):
    system, _ = hand_worked
    system.save(tmp_path / "ck")
    out_json, out_md, out_html = tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.html"
    assert viewer_main([str(tmp_path / "ck"), "--export-json", str(out_json), "--export-md", str(out_md),
                        "--export-html", str(out_html)]) == 0
    printed = capsys.readouterr().out.splitlines()
    below = {line.split("  ")[-1]: printed[n + 1].strip() for n, line in enumerate(printed) if line.startswith("    #")}
    assert below[LESSONS[0]] == "shown: 1/2 (50%); same clusters, not shown: 1/1 (100%); difference: -50 pp"
    assert below[LESSONS[1]] == "shown: 0/1 (0%); same clusters, not shown: 2/2 (100%); difference: -100 pp"
    assert below[LESSONS[2]] == "shown: 0/1 (0%); same clusters, not shown: 3/4 (75%); difference: -75 pp"
    view = json.loads(out_json.read_text())
    [row] = [r for r in view["zones"]["golden"]["principle"] if r["entry_id"] == 2]
    assert row["outcomes"] == {"shown": {"successes": 0, "episodes": 1, "rate": 0.0},
                               "unshown": {"successes": 3, "episodes": 4, "rate": 0.75}, "difference": -0.75}
    assert (row["shown_episodes"], row["unshown_successes"]) == (1, 3)
    markdown = out_md.read_text()
    assert "| retrieved | shown | same clusters, not shown | difference | verdict |" in markdown
    assert "| 1/2 (50%) | 1/1 (100%) | -50 pp | not checkable | Lesson linked to the fridge. |" in markdown
    page = out_html.read_text()
    assert "<th>shown</th><th>same clusters, not shown</th><th>difference</th>" in page
    assert ("<td class='number'>0/1 (0%)</td><td class='number'>2/2 (100%)</td><td class='number'>-100 pp</td>"
            in page)


def test_the_diff_shows_the_outcomes_of_the_listed_entries(hand_worked, tmp_path, capsys):
    system, _ = hand_worked
    system.save(tmp_path / "a")
    assert system.library.admit(Candidate(LESSONS[0], "golden", "principle", 1.0), 1)[0] == "merged"
    system.save(tmp_path / "b")
    assert viewer_main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--export-md", str(tmp_path / "d.md")]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("merged")]
    assert "shown: 1/2 (50%); same clusters, not shown: 1/1 (100%); difference: -50 pp;" in line
    assert "| 1/2 (50%) | 1/1 (100%) | -50 pp | Lesson linked to the fridge. |" in (tmp_path / "d.md").read_text()
    assert viewer_main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    [merged] = json.loads(capsys.readouterr().out)["zones"]["golden"]["principle"]["merged"]
    assert merged["entry_id"] == 0 and merged["outcomes"]["shown"] == {"successes": 1, "episodes": 2, "rate": 0.5}
    assert merged["outcomes"]["difference"] == -0.5


# an independent reference on random episodes ------------------------------------------------------------------

STATES = [f"state {i}" for i in range(4)]  # exact clusters: one per state


def reference(links, episodes):
    """The docstring's definitions, computed naively: links grow by the clusters of the steps shown an entry,
    then every entry looks at every episode. ``episodes``: (won, faulted, [(state index, shown ids)])."""
    links = {e: set(cs) for e, cs in links.items()}
    for _, _, steps in episodes:
        for state, shown in steps:
            for e in shown:
                if e in links:
                    links[e].add(state)
    out = {}
    for e, linked in links.items():
        n_shown = s_shown = n_other = s_other = 0
        for won, faulted, steps in episodes:
            if faulted:
                continue
            if any(e in shown for _, shown in steps):
                n_shown, s_shown = n_shown + 1, s_shown + won
            elif any(state in linked for state, _ in steps):
                n_other, s_other = n_other + 1, s_other + won
        out[e] = (n_shown, s_shown, n_other, s_other)
    return out


step_st = st.tuples(st.integers(0, len(STATES) - 1), st.sets(st.integers(0, 5), max_size=3),
                    st.sampled_from(["driver", "none", "worker-local"]))
episode_st = st.tuples(st.booleans(), st.integers(0, 9).map(lambda n: n == 0), st.lists(step_st, min_size=1, max_size=4))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(links=st.lists(st.sets(st.integers(0, len(STATES) - 1), max_size=3), min_size=1, max_size=4),
       episodes=st.lists(episode_st, min_size=1, max_size=8))
def test_evolve_agrees_with_a_naive_reference_on_random_episodes(cfg, links, episodes):
    system = ExperienceSystem.from_config(cfg(enable_clustering=False))
    system.begin_iteration(0)
    cluster = clusters_of(system, STATES)
    system.library.insert_unchecked([Candidate(f"lesson {n}", "golden", "principle", 1.0,
                                               cluster_ids=[cluster[s] for s in linked])
                                     for n, linked in enumerate(links)], 0)
    recorded = {"driver": lambda s: cluster[s], "none": lambda s: None, "worker-local": lambda s: PROVISIONAL_BASE + s}
    trajectories = [episode(f"t{n}", WON if won else LOST,
                            [(STATES[s], recorded[how](s), sorted(shown)) for s, shown, how in steps],
                            failure_reason="step timeout" if faulted else None)
                    for n, (won, faulted, steps) in enumerate(episodes)]
    system.evolve(trajectories, 0)
    want = reference(dict(enumerate(links)), [(won, faulted, [(s, shown) for s, shown, _ in steps])
                                              for won, faulted, steps in episodes])
    assert {e: counts(system.library.entries[e]) for e in want} == want

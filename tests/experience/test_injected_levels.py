"""forge/injected/<level>: which library levels reached the prompts, per step (hand-counted)."""

from recipe.forge.experience.library import Candidate, ExperienceLibrary
from recipe.forge.experience.metrics import injected_level_stats


def _library_with(levels):
    library = ExperienceLibrary()
    ids = []
    for i, (zone, level) in enumerate(levels):
        ids.append(library.insert_unchecked([Candidate(zone=zone, level=level, text=f"lesson {i}", score=1.0,
                                                       key=f"obs {i}", task="t")], 0)[0])
    return library, ids


def test_counts_each_level_per_step_and_pruned_ids_apart(traj):
    library, (principle, example, mistake) = _library_with(
        [("golden", "principle"), ("golden", "example"), ("warning", "mistake")])
    t = traj("u", "a", "task", [("s0", "+"), ("s1", "+"), ("s2", "-"), ("s3", "+")], 1.0)
    shown = [(principle, example), (example,), (mistake, 999), ()]
    for record, ids in zip(t.steps, shown):
        record.experience_ids = tuple(str(i) for i in ids)
    stats = injected_level_stats(t.steps, library.entries)
    # 4 steps: principle once, example twice, mistake once, one id no longer in the library
    assert stats["forge/injected/principle"] == 0.25
    assert stats["forge/injected/example"] == 0.5
    assert stats["forge/injected/mistake"] == 0.25
    assert stats["forge/injected/removed"] == 0.25
    assert stats["forge/injected/method"] == stats["forge/injected/pattern"] == stats["forge/injected/diagnostic"] == 0
    assert sum(stats.values()) * 4 == sum(len(ids) for ids in shown)


def test_no_steps_gives_zeros():
    stats = injected_level_stats([], {})
    assert set(stats) == {f"forge/injected/{name}" for name in
                          ("principle", "method", "example", "mistake", "pattern", "diagnostic", "removed")}
    assert not any(stats.values())

"""What one step's clustering and retrieval cost, and what the library file weighs, by observation size.

For each size (default 1 KB, 1 MB and 5 MB characters): an experience system with the shipped defaults (gates
open from the start) gets ``--steps`` steps of new observations of that size (ALFWorld/WebShop-like text from
recipe/forge/experience/synthetic.py repeated up to the size, each starting with its own text), then evolves once
from them (won and failed episodes whose one-word answers have 100,000 characters), then gets the same number of
steps revisiting those observations with their last character changed (a cluster join, the retrieval of its
lessons and their rendering). A step is one ``provide`` call: clustering, retrieval, rendering. Afterwards the
library is saved.

Reported per size: the mean and the largest CPU seconds of a step (``time.process_time``: a busy machine inflates
wall time more), each phase's mean, the mean's ratio to the smallest size's mean in the same run (the 1 KB
baseline with the defaults), the library file's bytes, the longest prototype and lesson, the longest rendered
experience text, and the clusters. ``--max-key-chars`` replaces ``algorithm.forge.max_key_chars``: a huge value
measures the cost without the bound (only for small sizes: 1 MB then takes seconds per step).

    python scripts/bench_observation_size.py --json
    python scripts/bench_observation_size.py --sizes 1000 100000 --max-key-chars 1000000000 --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agent_system.multi_turn_rollout.protocols import StepQuery, StepRecord, TrajectoryRecord
from recipe.forge.config_schema import ForgeConfig
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.store import checkpoint_path

ANSWER = "x" * 100_000  # a one-word answer of 100,000 characters


def observations(size: int, count: int, seed: int) -> list[str]:
    """``count`` observations of exactly ``size`` characters, each starting with its own synthetic text."""
    out = []
    for i in range(count):
        page = f"Observation {i}. " + " ".join(synthetic.corpus(8, seed=seed + i))
        out.append((page * (size // len(page) + 1))[:size])
    return out


def record(obs: str, cluster_id: int, step: int, traj_uid: str, reward: float, done: bool) -> StepRecord:
    return StepRecord(uid="task", traj_uid=traj_uid, step=step, anchor_obs=obs, messages=[], plain_messages=[],
                      response_text=f"<action>{ANSWER}</action>", action=ANSWER, prompt_ids=[], response_ids=[],
                      logprobs=[], reward=reward, is_action_valid=True, done=done, cluster_id=cluster_id)


def episodes(steps: list[tuple[str, int]]) -> list[TrajectoryRecord]:
    """One won episode over the first half of ``steps`` ((observation, cluster id)) and one failed over the rest."""
    half = max(len(steps) // 2, 1)
    out = []
    for name, part, reward in (("won", steps[:half], 1.0), ("failed", steps[half:] or steps[:1], 0.0)):
        records = [record(obs, cid, i, name, reward if i == len(part) - 1 else 0.0, i == len(part) - 1)
                   for i, (obs, cid) in enumerate(part)]
        out.append(TrajectoryRecord(uid="task", traj_uid=name, task="put a clean mug in the coffeemachine.",
                                    task_type="pick_clean_then_place", steps=records, episode_reward=reward,
                                    success=reward > 0.5, length=len(records)))
    return out


def timed_steps(system: ExperienceSystem, texts: list[str], prefix: str) -> tuple[list[float], list]:
    """(CPU seconds of each step, its StepExperience) for one step per text."""
    seconds, got = [], []
    for i, obs in enumerate(texts):
        query = StepQuery(obs, "put a clean mug in the coffeemachine.", "pick_clean_then_place", "task",
                          f"{prefix}{i}", i)
        started = time.process_time()
        got.append(system.provide([query])[0])
        seconds.append(time.process_time() - started)
    return seconds, got


def measure(size: int, steps: int, max_key_chars: int | None) -> dict:
    extra = {} if max_key_chars is None else {"max_key_chars": max_key_chars}
    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0, library_save_freq=1000,
                                                      checkpoint_dir="unused", **extra))
    new = observations(size, steps, seed=size % 997)
    first, found = timed_steps(system, new, "new")
    system.evolve(episodes([(obs, e.cluster_id) for obs, e in zip(new, found)]), 0)
    second, shown = timed_steps(system, [obs[:-1] + "#" for obs in new], "again")
    with tempfile.TemporaryDirectory() as folder:
        library_bytes = checkpoint_path(system.save(Path(folder)).parent).stat().st_size
    every = first + second
    return {
        "observation_chars": size, "steps": len(every), "mean_step_cpu_s": sum(every) / len(every),
        "max_step_cpu_s": max(every), "new_step_cpu_s": sum(first) / len(first),
        "revisit_step_cpu_s": sum(second) / len(second), "library_file_bytes": library_bytes,
        "clusters": len(system.index), "entries": len(system.library),
        "longest_prototype_chars": max(len(system.index.prototype(c)) for c in system.index.cluster_ids()),
        "longest_lesson_chars": max((len(e.text) for e in system.library.all_entries()), default=0),
        "longest_experience_text_chars": max(len(e.text) for e in shown),
        "revisits_joined": sum(a.cluster_id == b.cluster_id for a, b in zip(found, shown)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 1_000_000, 5_000_000],
                        help="observation sizes in characters; the smallest is the baseline of the ratios")
    parser.add_argument("--steps", type=int, default=4, help="new observations per size (as many revisits follow)")
    parser.add_argument("--max-key-chars", type=int, default=None,
                        help="algorithm.forge.max_key_chars (default: the shipped default)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    if min(args.sizes) < 2 or args.steps < 1:
        raise SystemExit("--sizes must be >= 2 characters and --steps >= 1")
    rows = [measure(size, args.steps, args.max_key_chars) for size in sorted(args.sizes)]
    base = rows[0]["mean_step_cpu_s"]
    for row in rows:
        row["ratio_to_smallest"] = row["mean_step_cpu_s"] / base if base > 0 else float("nan")
    summary = {"baseline_chars": rows[0]["observation_chars"], "max_key_chars": args.max_key_chars,
               "worst_ratio_to_smallest": max(r["ratio_to_smallest"] for r in rows),
               "largest_library_file_bytes": max(r["library_file_bytes"] for r in rows), "rows": rows}
    if args.json:
        print(json.dumps(summary))
        return
    for row in rows:
        print(f"{row['observation_chars']:>9,} chars: {row['mean_step_cpu_s'] * 1e3:8.2f} ms/step "
              f"(max {row['max_step_cpu_s'] * 1e3:.2f}, x{row['ratio_to_smallest']:.2f}), library file "
              f"{row['library_file_bytes']:,} B, longest prototype {row['longest_prototype_chars']:,}, "
              f"experience text {row['longest_experience_text_chars']:,} chars, {row['clusters']} clusters")


if __name__ == "__main__":
    main()

"""Benchmark: assign + retrieve for a batch of observations against 1e3 / 1e4 / 1e5 clusters and entries.

For each size N the script builds an ExperienceSystem holding N observation clusters (realistic ALFWorld /
WebShop-like text from ``recipe.forge.experience.synthetic``, assigned until N clusters exist) and N library
entries (inserted without the novelty check, each keyed by a cluster's observation and linked to it), then
times ``provide`` calls (the fastest of ``--repeats`` batches, run round-robin over the sizes, in CPU seconds of
this process so that other jobs on a shared machine disturb the figures less) for a batch of 1,024 queries (half revisits: a known observation with one or two
digits changed; half fresh observations), with the gates open: cluster assignment, retrieval (cluster pool or
the whole-library fallback) and rendering.

Baseline, in the same run: the naive O(N) method (GiGPO's / the original code's): for each query a linear scan
of all N prototypes with ``difflib.SequenceMatcher.ratio`` to find its cluster. It is time-capped: the pairs
(query, prototype) are compared in scan order until ``--naive-budget-s`` is spent; the naive batch time is
the measured mean time per pair x N x batch size. The naive fallback scan over all entry keys is not counted,
so the naive figure is a lower bound and the speedup is conservative.

Also reported: recall of the sub-linear cluster search against an exact linear rapidfuzz scan (on a sample of
the queries, read-only, before the timed batch), the resident memory the largest system added (VmRSS after
building it minus before), and the process's peak RSS.

    .venv/bin/python scripts/bench_library.py            # table
    .venv/bin/python scripts/bench_library.py --json     # one JSON line
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import difflib
import json
import random
import resource
import sys
import time

import numpy as np
from rapidfuzz import fuzz, process
from tqdm import tqdm

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.config_schema import ForgeConfig
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate
from recipe.forge.experience.similarity import LSHParams

THRESHOLD = 0.85
# The population is built without the search's second pass (a new observation then costs one LSH pass, so 10^5
# clusters build in minutes); every figure is measured with the default search. Without the second pass a few
# borderline observations found their own cluster instead of joining one, which leaves the population a little
# denser than a default build would.
BUILD_LSH = replace(LSHParams(), rescue_candidates=0)


def entry_text(rng: random.Random) -> str:
    obj, rec = synthetic._thing(rng, synthetic.OBJECTS), synthetic._thing(rng, synthetic.RECEPTACLES)
    return rng.choice([
        f"To find the {obj}, go to {rec} first, open it, and take the {obj} before moving on.",
        f"Repeating \"go to {rec}\" made no progress: after one try, choose a different action.",
        f"At \"You arrive at {rec}.\", the action \"take {obj} from {rec}\" moved the task forward.",
        f"Failed after {rng.randint(5, 50)} steps: the last action \"open {rec}\" led nowhere.",
    ])


def build(n: int, seed: int, desc: str) -> tuple[ExperienceSystem, list[int]]:
    """A system with exactly ``n`` clusters and ``n`` entries; returns it and the cluster ids."""
    per_level = -(-n // 6) + 1
    cfg = ForgeConfig(golden_capacity_per_level=per_level, warning_capacity_per_level=per_level,
                      max_clusters=max(2 * n, 1), warmup_iterations=0, min_library_size=0, library_save_freq=10**9)
    system = ExperienceSystem.from_config(cfg, lsh=BUILD_LSH)
    rng = random.Random(seed)
    with tqdm(total=n, desc=f"{desc}: clusters", file=sys.stderr, leave=False) as bar:
        while len(system.index) < n:
            before = len(system.index)
            system.index.assign(synthetic.observation(rng), 0)
            bar.update(len(system.index) - before)
    cluster_ids = list(system.index.cluster_ids())
    zones = [(z, lvl) for z in (GOLDEN, WARNING) for lvl in LEVELS[z]]
    candidates = []
    for i in tqdm(range(n), desc=f"{desc}: entries", file=sys.stderr, leave=False):
        cid = cluster_ids[rng.randrange(len(cluster_ids))]
        zone, level = zones[i % len(zones)]
        _, task = synthetic.alfworld_task(rng)
        candidates.append(Candidate(text=entry_text(rng), zone=zone, level=level, score=rng.uniform(0, 10),
                                    task=task, key=system.index.prototype(cid), cluster_ids=[cid]))
    system.library.insert_unchecked(candidates, 0)
    assert len(system.library) == n, (len(system.library), n)
    # the indexes' tables do not depend on the second pass: from here on they search with the defaults
    system.index._search.params = system.library._keys.params = LSHParams()
    return system, cluster_ids


def make_queries(system: ExperienceSystem, cluster_ids: list[int], batch: int, seed: int) -> list[StepQuery]:
    rng = random.Random(seed)
    queries = []
    for i in range(batch):
        if i % 2 == 0:
            obs = synthetic.perturb(system.index.prototype(rng.choice(cluster_ids)), rng, rng.randint(1, 2))
        else:
            obs = synthetic.observation(rng)
        _, task = synthetic.alfworld_task(rng)
        queries.append(StepQuery(obs, task, None, f"u{i // 8}", f"t{i}", i % 8))
    return queries


def naive_assign(obs: str, prototypes: list[tuple[int, str]], deadline: float) -> tuple[int | None, int]:
    """The linear-scan reference for cluster assignment: difflib against every prototype, keeping the best
    >= threshold. Returns (cluster or None, pairs compared); stops early at ``deadline``."""
    best, best_score, pairs = None, THRESHOLD, 0
    for cid, proto in prototypes:
        score = difflib.SequenceMatcher(None, obs, proto).ratio()
        pairs += 1
        if score >= best_score and (best is None or score > best_score):
            best, best_score = cid, score
        if pairs % 256 == 0 and time.perf_counter() >= deadline:
            break
    return best, pairs


def time_naive(system: ExperienceSystem, queries: list[StepQuery], budget_s: float) -> tuple[float, int, int]:
    """(estimated CPU seconds per query, queries fully scanned, pairs compared) of the naive cluster scan.

    The naive cost per query is estimated as N prototypes x the mean difflib time per pair, measured on the
    batch's own (query, prototype) pairs in scan order until ``budget_s`` is spent. Only the cluster scan is
    counted, not the naive fallback scan over all entry keys, so this is a lower bound of the naive cost."""
    prototypes = [(cid, c.prototype) for cid, c in system.index.clusters.items()]
    deadline = time.perf_counter() + budget_s
    cpu_start = time.process_time()
    pairs = full = 0
    for query in queries:
        _, done = naive_assign(query.anchor_obs, prototypes, deadline)
        pairs += done
        full += done == len(prototypes)
        if time.perf_counter() >= deadline:
            break
    per_pair = (time.process_time() - cpu_start) / pairs
    return per_pair * len(prototypes), full, pairs


def recall(system: ExperienceSystem, queries: list[StepQuery], sample: int) -> dict[str, float]:
    """Read-only check of the sub-linear cluster search against an exact linear rapidfuzz scan of all prototypes,
    on the first ``sample`` queries: among queries with an exact match >= threshold, the share the index also
    matches ("recall"), the share where it finds a best-scoring prototype ("recall_best"), and the recall among
    queries whose best exact match is >= 0.90 ("recall_at_0.90")."""
    ids = list(system.index.cluster_ids())
    protos = [system.index.prototype(c) for c in ids]
    found = best = total = close = close_found = 0
    for query in queries[:sample]:
        exact = process.extractOne(query.anchor_obs, protos, scorer=fuzz.ratio, score_cutoff=THRESHOLD * 100 - 1e-9)
        if exact is None:
            continue
        ours = system.index.match(query.anchor_obs)
        total += 1
        found += ours is not None
        best += ours is not None and abs(ours[1] * 100 - exact[1]) < 1e-6
        if exact[1] >= 90.0:
            close += 1
            close_found += ours is not None
    return {"recall": found / max(total, 1), "recall_best": best / max(total, 1),
            "recall_at_0.90": close_found / max(close, 1), "recall_queries": total}


def current_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(sizes: list[int], batch: int, budget_s: float, seed: int, recall_sample: int, repeats: int) -> dict:
    """Build every size first, then time the batches round-robin over the sizes (size 1, 2, 3, 1, 2, 3, ...) so
    that load from other processes affects all sizes alike; the fastest batch per size counts. Times are CPU
    seconds of this process (``time.process_time``), for ours and for the naive scan alike, which other jobs on
    the machine disturb far less than wall time; wall times are reported too."""
    built = []
    for n in sizes:
        rss_before = current_rss_mb()
        system, cluster_ids = build(n, seed, f"N={n:,}")
        # all batches are drawn before any is run: revisits of the original clusters, fresh observations
        batches = [make_queries(system, cluster_ids, batch, seed + 1 + rep) for rep in range(repeats)]
        row = {"n": n, "rss_growth_mb": current_rss_mb() - rss_before, **recall(system, batches[0], recall_sample)}
        naive_per_query, row["naive_queries_fully_scanned"], row["naive_pairs_measured"] = time_naive(
            system, batches[0], budget_s)
        row["naive_s_extrapolated"] = naive_per_query * batch
        system.begin_iteration(1)
        built.append((system, batches, row, [], []))
    for rep in range(repeats):
        for system, batches, row, cpu, wall in built:
            system.stats.fallbacks = 0
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            out = system.provide(batches[rep])
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - wall_start)
            if rep == 0:
                row["hit_rate"] = float(np.mean([bool(o.entry_ids) for o in out]))
                row["fallback_rate"] = system.stats.fallbacks / batch
    rows = []
    for system, _, row, cpu, wall in built:
        ours = min(cpu)
        row.update({"ours_s": ours, "ours_s_all_repeats": cpu, "ours_wall_s_all_repeats": wall,
                    "ours_ms_per_query": 1e3 * ours / batch, "speedup": row["naive_s_extrapolated"] / ours})
        rows.append(row)
    by_n = {r["n"]: r for r in rows}
    # time ratio between consecutive sizes, normalised to a 10x step in size
    growth = [(b["ours_s"] / a["ours_s"]) ** (1.0 / np.log10(b["n"] / a["n"])) for a, b in zip(rows, rows[1:])]
    return {
        "batch": batch,
        "threshold": THRESHOLD,
        "rows": rows,
        "speedup_vs_linear_at_10k": by_n[10_000]["speedup"] if 10_000 in by_n else None,
        "recall_at_10k": by_n[10_000]["recall"] if 10_000 in by_n else None,
        "growth_per_10x": max(growth) if growth else None,
        "growth_per_10x_each": growth,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_at": max(sizes),
        "memory_at_largest_mb": rows[-1]["rss_growth_mb"],
        "clock": "CPU seconds of this process (time.process_time); wall times in ours_wall_s_all_repeats",
        "naive": "difflib.SequenceMatcher.ratio linear scan of all N prototypes per query (cluster assignment only: "
                 "a lower bound of the naive cost), time-capped: mean CPU time per pair measured on the batch's "
                 "pairs in scan order, times N x batch",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--naive-budget-s", type=float, default=10.0, help="time cap of the naive scan per size")
    parser.add_argument("--recall-sample", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per size (the fastest counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    result = run(sorted(args.sizes), args.batch, args.naive_budget_s, args.seed, args.recall_sample, args.repeats)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"assign + retrieve + render, batch of {args.batch} observations, threshold {THRESHOLD}; CPU seconds")
    print(f"{'N clusters = N entries':>22} | {'ours (s)':>9} | {'ms/query':>8} | {'naive difflib (s)':>17} | "
          f"{'pairs timed':>11} | {'speedup':>8} | {'recall':>6} | {'recall>=.9':>10} | {'hit rate':>8}")
    for r in result["rows"]:
        print(f"{r['n']:>22,} | {r['ours_s']:>9.3f} | {r['ours_ms_per_query']:>8.3f} | "
              f"{r['naive_s_extrapolated']:>17.1f} | {r['naive_pairs_measured']:>11,} | {r['speedup']:>7.0f}x | "
              f"{r['recall']:>6.3f} | {r['recall_at_0.90']:>10.3f} | {r['hit_rate']:>8.2f}")
    print(f"growth per 10x entries: {', '.join(f'{g:.2f}x' for g in result['growth_per_10x_each'])} "
          f"(max {result['growth_per_10x']:.2f}x)")
    print(f"memory: the N={max(args.sizes):,} system (index + library + their search tables) added "
          f"{result['memory_at_largest_mb']:.0f} MB resident; process peak RSS {result['peak_rss_mb']:.0f} MB "
          "(includes torch/verl imported by the config schema)")
    print("naive: " + result["naive"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a new library version costs an agent-loop worker of the verl engine, by number of observation clusters.

For each size: a driver index of that many ALFWorld/WebShop-like prototypes (recipe/forge/experience/synthetic.py);
its snapshot as published before (plain: the worker re-hashes every prototype) and now (``with_search``: the
driver's search ships pickled); the driver's snapshot seconds and pickled MB, the worker's load seconds
(unpickle + ``ExperienceSystem.from_snapshot``), and the longest stall of the worker's event loop while
``WorkerLibrary.refresh`` loads the version in its thread (a coroutine ticking every 5 ms measures the largest
gap; before, the load ran on the loop, so the stall was the whole load), next to the longest garbage collection
meanwhile (CPython's full collection over millions of index objects holds the GIL in whichever thread runs it).

    python scripts/bench_library_refresh.py --clusters 1000 10000 100000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pickle
import time

from recipe.forge.config_schema import ForgeConfig
from recipe.forge.engines.verl.library_channel import WorkerLibrary
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.index import Cluster, ObservationIndex


class PublishedOnce:
    """A broker holding one published snapshot (BrokerClient's two calls, in-process)."""

    def __init__(self, snapshot):
        self.snapshot = snapshot
        self.blob = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)  # what Ray would hold

    async def tag(self):
        return ("bench", self.snapshot.version, self.snapshot.iteration)

    def latest(self):
        return ("bench", self.snapshot.version, self.snapshot.iteration), pickle.loads(self.blob)


def driver_with_clusters(n: int) -> ExperienceSystem:
    system = ExperienceSystem.from_config(ForgeConfig(max_clusters=max(n, 1), library_save_freq=1000,
                                                      checkpoint_dir="unused"))
    state = system.index.state_dict()
    state["clusters"] = [vars(Cluster(i, text, 1, 0, 0)) for i, text in enumerate(synthetic.corpus(n, seed=n))]
    state["next_id"] = n
    system.index = ObservationIndex.from_state(state)
    return system


async def loop_stall(snapshot) -> tuple[float, float, float]:
    """(seconds refresh took, longest gap in seconds between ticks of another coroutine meanwhile, longest single
    garbage collection meanwhile: a full collection holds the GIL and stalls every thread, the loop included)."""
    library = WorkerLibrary(connect=lambda: PublishedOnce(snapshot))
    ticks, collections, gc_started = [], [0.0], []

    def on_gc(phase, info):
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            collections.append(time.perf_counter() - gc_started.pop())

    gc.callbacks.append(on_gc)

    async def ticker():
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    clock = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    await library.refresh()
    ended = time.perf_counter()
    clock.cancel()
    gc.callbacks.remove(on_gc)
    during = [started] + [t for t in ticks if started < t < ended] + [ended]
    return ended - started, max(b - a for a, b in zip(during, during[1:])), max(collections)


def measure(n: int) -> dict:
    driver = driver_with_clusters(n)
    out = {"clusters": n}
    for name, with_search in (("plain", False), ("with_search", True)):
        started = time.perf_counter()
        snap = driver.snapshot(with_search=with_search)
        blob = pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL)
        out[f"{name}_driver_snapshot_s"] = time.perf_counter() - started
        out[f"{name}_mb"] = len(blob) / 1e6
        started, cpu = time.perf_counter(), time.process_time()
        ExperienceSystem.from_snapshot(pickle.loads(blob))
        out[f"{name}_worker_load_s"] = time.perf_counter() - started
        out[f"{name}_worker_load_cpu_s"] = time.process_time() - cpu  # less sensitive to a busy machine
        refresh_s, stall_s, gc_s = asyncio.run(loop_stall(snap))
        out[f"{name}_refresh_s"] = refresh_s
        out[f"{name}_max_loop_stall_s"] = stall_s
        out[f"{name}_longest_gc_s"] = gc_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--json", action="store_true", help="print one JSON line per size")
    args = parser.parse_args()
    if min(args.clusters) < 1:
        raise SystemExit("--clusters must be >= 1")
    for n in args.clusters:
        row = measure(n)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{n:>7} clusters: worker load {row['plain_worker_load_s']:.2f} s -> {row['with_search_worker_load_s']:.2f} s, "
                  f"snapshot {row['plain_mb']:.1f} -> {row['with_search_mb']:.1f} MB, driver "
                  f"{row['plain_driver_snapshot_s']:.2f} -> {row['with_search_driver_snapshot_s']:.2f} s, "
                  f"longest loop stall {row['plain_max_loop_stall_s'] * 1e3:.0f} / "
                  f"{row['with_search_max_loop_stall_s'] * 1e3:.0f} ms", flush=True)


if __name__ == "__main__":
    main()

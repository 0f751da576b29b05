"""What a new library version costs the verl engine's driver and each agent-loop worker, by number of clusters.

For each size: a driver ExperienceSystem holding that many ALFWorld/WebShop-like cluster prototypes
(recipe/forge/experience/synthetic.py) publishes its library as ``LibraryDriver.begin_iteration`` does (a snapshot
with the observation search, one ``ray.put``, the reference handed to the broker), and ``--workers`` agent-loop
workers, Ray actors as verl's AgentLoopWorkers are, each with its own process, event loop and ``WorkerLibrary``,
load that version at the same moment through ``WorkerLibrary.refresh`` while a coroutine ticks every 5 ms on each
one's event loop. Reported per size (one JSON line with --json):

* ``publish_s`` (``publish_cpu_s``: CPU seconds of the driver process): the driver's time from snapshot to
  broker, of which ``snapshot_s`` making the snapshot; ``snapshot_mb``: its pickled size;
* ``workers``, one dict per worker: ``load_s`` (``load_cpu_s``), the refresh that fetches the stored snapshot and
  restores the provider in the loader thread; ``max_loop_stall_s``, the longest gap between ticks of the worker's
  event loop meanwhile; ``longest_gc_s``, the longest garbage collection meanwhile (a full collection holds the
  GIL in whichever thread runs it, the loop's included); ``rss_before_mb`` and ``peak_rss_mb``, the worker
  process's resident memory before the load and its peak during the load (Linux VmHWM, reset before the load;
  pages of Ray's object store that the worker maps count too).

Wall times depend on the load of the machine (the workers share its cores with each other and with the driver);
CPU seconds less so.

    python scripts/bench_library_refresh.py --clusters 1000 10000 100000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pickle
import time

import ray

from recipe.forge.config_schema import ForgeConfig
from recipe.forge.engines.verl.library_channel import WorkerLibrary, get_or_create_broker, publish
from recipe.forge.experience import ExperienceSystem, synthetic
from recipe.forge.experience.index import Cluster, ObservationIndex


def driver_with_clusters(n: int) -> ExperienceSystem:
    """A driver system whose index holds ``n`` synthetic prototypes (assigned directly: no search needed)."""
    system = ExperienceSystem.from_config(ForgeConfig(max_clusters=max(n, 1), library_save_freq=1000,
                                                      checkpoint_dir="unused"))
    state = system.index.state_dict()
    state["clusters"] = [Cluster(i, text, 1, 0, 0).to_dict() for i, text in enumerate(synthetic.corpus(n, seed=n))]
    state["next_id"] = n
    system.index = ObservationIndex.from_state(state)
    return system


def memory_mb(field: str) -> float:
    """``field`` (VmRSS, VmHWM) of this process, in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def reset_peak_rss() -> None:
    """Start VmHWM afresh from the current resident size (Linux: /proc/self/clear_refs, value 5)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


async def measure_refresh(library: WorkerLibrary) -> dict:
    """Load the published version with ``library.refresh`` while another coroutine ticks every 5 ms; returns what
    the module docstring lists for one worker, and the version and number of clusters loaded."""
    ticks, collections, gc_started = [], [0.0], []

    def on_gc(phase, info):
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            collections.append(time.perf_counter() - gc_started.pop())

    async def ticker():
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    gc.collect()
    reset_peak_rss()
    rss_before = memory_mb("VmRSS")
    gc.callbacks.append(on_gc)
    clock = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    started, cpu = time.perf_counter(), time.process_time()
    version, provider = await library.refresh()
    ended, cpu = time.perf_counter(), time.process_time() - cpu
    clock.cancel()
    gc.callbacks.remove(on_gc)
    during = [started] + [t for t in ticks if started < t < ended] + [ended]
    return {"version": version, "clusters": len(provider.system.index), "load_s": ended - started,
            "load_cpu_s": cpu, "max_loop_stall_s": max(b - a for a, b in zip(during, during[1:])),
            "longest_gc_s": max(collections), "rss_before_mb": rss_before, "peak_rss_mb": memory_mb("VmHWM")}


@ray.remote(num_cpus=0)
class AgentLoopWorker:
    """A worker process with its own event loop and library cache, connected to the broker like verl's."""

    def ready(self) -> bool:
        return True

    def load(self) -> dict:
        return asyncio.run(measure_refresh(WorkerLibrary()))


def measure(n: int, workers: int = 2) -> dict:
    """Publish a driver of ``n`` clusters once and load it in ``workers`` fresh worker processes (Ray must be
    initialised); returns one row."""
    driver = driver_with_clusters(n)
    broker = get_or_create_broker()
    actors = [AgentLoopWorker.remote() for _ in range(workers)]
    ray.get([a.ready.remote() for a in actors])  # started and imported before the clock runs
    started, cpu = time.perf_counter(), time.process_time()
    snapshot = driver.snapshot(with_search=True)
    snapshot_s = time.perf_counter() - started
    publish(broker, "bench", driver.version, n, snapshot)  # as LibraryDriver.begin_iteration does
    row = {"clusters": n, "publish_s": time.perf_counter() - started, "publish_cpu_s": time.process_time() - cpu,
           "snapshot_s": snapshot_s}
    row["workers"] = ray.get([a.load.remote() for a in actors])
    row["snapshot_mb"] = len(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)) / 1e6
    for actor in actors:
        ray.kill(actor)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print one JSON line per size")
    args = parser.parse_args(argv)
    if min(args.clusters) < 1 or args.workers < 1:
        raise SystemExit("--clusters and --workers must be >= 1")
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    try:
        for n in args.clusters:
            row = measure(n, args.workers)
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            loads = ", ".join(f"{w['load_s']:.2f} s (stall {w['max_loop_stall_s'] * 1e3:.0f} ms, peak "
                              f"{w['peak_rss_mb']:.0f} MB)" for w in row["workers"])
            print(f"{n:>7} clusters: publish {row['publish_s']:.2f} s ({row['snapshot_mb']:.1f} MB); "
                  f"worker loads {loads}", flush=True)
    finally:
        if started_ray:
            ray.shutdown()


if __name__ == "__main__":
    main()

"""The distributed engine on a real Ray cluster of several nodes, on one CPU machine.

Does here what docs/gpu_cluster.md (section 4) tells a multi-node user to do: ``ray start --head`` for the first
node, ``ray start --address=HEAD:PORT`` for each other one, each node with its own logical CPUs and one logical
GPU (recipe/forge/engines/verl/cpu/local_cluster.py; its own temp folders and ports, so it runs next to other Ray
instances, and only its own processes are ended afterwards, also on failure), then the same entry point
(scripts/verl_cpu_smoke.py: ``python -m recipe.forge.main_forge trainer.engine=verl trainer.device=cpu ...``) with
``trainer.nnodes=<nodes> trainer.n_gpus_per_node=1`` joining the cluster through ``RAY_ADDRESS``.

SIGTERM (or SIGHUP) stops the run and the cluster; if the script is killed outright, the cluster's watchdog ends
its processes and deletes its temp folder (local_cluster.py).

Prints one JSON line: the smoke script's summary of the run, ``cluster_up_s`` (the ``ray start`` commands until
Ray lists every node alive), ``nodes`` as Ray listed them, and ``placement``: for each Ray actor class of the run,
the node of each of its actors (``node0`` = the head), from Ray's state API (``ray list actors``) after the run.

Usage: python scripts/verl_cpu_cluster.py [--nodes 2] [--cpus-per-node 14] [--print-commands] [smoke args ...]
  --print-commands prints the ``ray start`` commands (at base port 6379, the temp folder /tmp/slea_ray) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipe.forge.engines.verl.cpu.local_cluster import AUTH, ClusterError, LocalCluster, node_command  # noqa: E402

DOC_BASE_PORT, DOC_TEMP_ROOT = 6379, "/tmp/slea_ray"  # the commands docs/gpu_cluster.md shows


def doc_commands(nodes: int, cpus_per_node: int) -> list[str]:
    """The ``ray start`` commands of ``nodes`` nodes as docs/gpu_cluster.md shows them (with the environment they
    run in: Ray's authentication mode)."""
    environment = " ".join(f"{key}={value}" for key, value in AUTH.items())
    return [f"{environment} {shlex.join(node_command(node, DOC_BASE_PORT, cpus_per_node, 1, DOC_TEMP_ROOT))}"
            for node in range(nodes)]


def exit_on_signal(signum, frame) -> None:
    """SIGTERM or SIGHUP ends the script as an exception does: the run is killed and the cluster stopped (a
    SIGKILL is the cluster's watchdog's to handle)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=int, default=14,
                        help="logical CPUs of each node: 10 per placement-group bundle (one per rank) + the rest")
    parser.add_argument("--print-commands", action="store_true")
    args, smoke_args = parser.parse_known_args(argv)
    if args.print_commands:
        print("\n".join(doc_commands(args.nodes, args.cpus_per_node)))
        return 0

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    cluster = None
    try:
        # the nodes' processes import this checkout (as the driver does), whatever is installed
        cluster = LocalCluster(nodes=args.nodes, num_cpus=args.cpus_per_node, num_gpus=1, env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
        return run_on(cluster, args.nodes, smoke_args)
    except ClusterError as exc:  # no free ports, a node that did not start, Ray's state API unreachable
        print(f"verl_cpu_cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        if cluster is not None:
            cluster.stop()


def run_on(cluster: LocalCluster, nodes: int, smoke_args: list[str]) -> int:
    """Start ``cluster``, run the smoke entry point on it and print its summary with the cluster's placement."""
    started = time.perf_counter()
    cluster.start()
    up_s = time.perf_counter() - started
    names = cluster.node_names()
    command = [sys.executable, str(REPO / "scripts" / "verl_cpu_smoke.py"), "--json", "--nodes", str(nodes),
               "--ranks", "1", *smoke_args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=cluster.client_env())
    if result.returncode != 0:
        print(f"verl_cpu_cluster: the run on {nodes} nodes failed (exit {result.returncode})\n"
              f"{result.stderr[-6000:]}", file=sys.stderr)
        return 1
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    summary.update(cluster_up_s=round(up_s, 1), address=cluster.address,
                   cluster_nodes={name: node_id for node_id, name in names.items()},
                   placement=cluster.placement())
    print(json.dumps(summary))
    return 0

if __name__ == "__main__":
    sys.exit(main())

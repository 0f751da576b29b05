"""Attack for scripts/reliability_report.py (issue 35, item 5): the one-machine Ray cluster helper
(scripts/verl_cpu_cluster.py on recipe/forge/engines/verl/cpu/local_cluster.py).

On a machine without ``~/.ray`` (a fresh home folder), the script is started and, once its cluster is up and the
run has begun, SIGKILLed (and, in the full report, SIGTERMed in a second start; recipe/forge/engines/verl/cpu/cluster_processes.py).
``cluster_processes_left`` counts the cluster's processes still running a minute later, ``cluster_temp_left``
its temp folders left, ``cluster_token_readable`` token files or folders other users could read,
``cluster_home_written`` runs that wrote under ``~/.ray``, ``cluster_tracebacks`` scripts that ended in one. The
port search is asked for 5, 8, 40 and 250 nodes from pids all round its range (the machine's sockets left out:
every range but the lowest taken): ``cluster_ports_not_found`` counts the node counts it found no range for.

all_caught condition: see ATTACKS; before the fixes: a raw traceback (Ray found no token), 10-12 processes
left after SIGTERM or SIGKILL, the token file world-readable, no ports for 5 nodes or more, temp folders left.
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

from reliability_attacks import Attack


def attack_cluster_helper(quick: bool) -> dict:
    from recipe.forge.engines.verl.cpu import local_cluster
    from recipe.forge.engines.verl.cpu.local_cluster import ClusterError, free_base_port
    from recipe.forge.engines.verl.cpu.cluster_processes import signal_the_cluster_script

    counts = {"cluster_runs": 0, "cluster_runs_up": 0, "cluster_processes_left": 0, "cluster_temp_left": 0,
              "cluster_token_readable": 0, "cluster_home_written": 0, "cluster_tracebacks": 0,
              "cluster_port_searches": 0, "cluster_ports_not_found": 0}
    for sig in (signal.SIGKILL,) if quick else (signal.SIGKILL, signal.SIGTERM):
        with tempfile.TemporaryDirectory() as home:
            outcome = signal_the_cluster_script(sig, Path(home))
        counts["cluster_runs"] += 1
        counts["cluster_runs_up"] += outcome.came_up
        counts["cluster_processes_left"] += outcome.processes_left
        counts["cluster_temp_left"] += outcome.temp_left
        counts["cluster_token_readable"] += outcome.came_up and not outcome.token_private
        counts["cluster_home_written"] += outcome.home_written
        counts["cluster_tracebacks"] += "Traceback" in outcome.output

    real_free = local_cluster.ports_free
    try:
        for nodes in (5, 8, 40, 250):
            count = len(local_cluster.HEAD_PORTS) + nodes * local_cluster.PORTS_PER_NODE
            local_cluster.ports_free = lambda first, n, count=count: first == 20000 and n == count
            for pid in (0, 7, 31, 49, 12345):
                counts["cluster_port_searches"] += 1
                try:
                    free_base_port(nodes, start=20000, stop=32768, spread=pid)
                except ClusterError:
                    counts["cluster_ports_not_found"] += 1
    finally:
        local_cluster.ports_free = real_free
    return counts


ATTACKS = [
    Attack(attack_cluster_helper,
           lambda r: r["cluster_runs_up"] == r["cluster_runs"] > 0 and r["cluster_processes_left"] == 0
           and r["cluster_temp_left"] == 0 and r["cluster_token_readable"] == 0 and r["cluster_home_written"] == 0
           and r["cluster_tracebacks"] == 0 and r["cluster_port_searches"] > 0 and r["cluster_ports_not_found"] == 0,
           {"processes_left": ("cluster_processes_left",), "tracebacks": ("cluster_tracebacks",)}),
]

"""The one-machine Ray cluster (cpu/local_cluster.py, scripts/verl_cpu_cluster.py). Its state-API reader: an answer
that is not JSON (Ray's state API prints nothing while the dashboard starts) is a ClusterError, which waiting for
the nodes retries, not a JSONDecodeError that ends the wait at once (the Ray CLI is a stand-in script there). Its
port search, for any node count that fits. And the script on a machine without ~/.ray, signalled mid-run (issue
35 item 5): real one-node clusters."""

from __future__ import annotations

import pytest

from recipe.forge.engines.verl.cpu.local_cluster import ClusterError, LocalCluster


@pytest.fixture
def silent_ray(tmp_path):
    """A ``ray`` command that answers every call with nothing, and counts its calls."""
    calls = tmp_path / "calls"
    script = tmp_path / "ray"
    script.write_text(f"#!/bin/sh\necho call >> {calls}\nexit 0\n")
    script.chmod(0o755)
    return script, calls


def test_an_answer_that_is_not_json_is_a_cluster_error_naming_the_command(silent_ray):
    cluster = LocalCluster(nodes=1)
    cluster.ray_cli = str(silent_ray[0])
    with pytest.raises(ClusterError, match="ray list nodes .* printed no JSON"):
        cluster.alive_nodes()
    cluster.stop()


def test_waiting_for_the_nodes_asks_again_until_its_deadline(silent_ray):
    script, calls = silent_ray
    cluster = LocalCluster(nodes=1)
    cluster.ray_cli = str(script)
    with pytest.raises(ClusterError, match="were not all alive after 2 s .*printed no JSON"):
        cluster.wait_for_nodes(timeout_s=2.0)
    assert len(calls.read_text().splitlines()) >= 2  # asked more than once


@pytest.mark.parametrize("nodes", [1, 2, 5, 8, 40, 250])
def test_a_free_port_range_is_found_for_any_node_count_that_fits(nodes, monkeypatch):
    """Whatever the pid, and with only the lowest range free (ports_free stands in for the machine's sockets). Before
    the fix the search started at a point set by the pid and never wrapped round: 5 nodes or more found no range
    for most pids."""
    from recipe.forge.engines.verl.cpu import local_cluster
    from recipe.forge.engines.verl.cpu.local_cluster import HEAD_PORTS, PORTS_PER_NODE, free_base_port

    count = len(HEAD_PORTS) + nodes * PORTS_PER_NODE
    monkeypatch.setattr(local_cluster, "ports_free", lambda first, n: first == 20000 and n == count)
    for pid in (0, 7, 31, 49, 12345, 99991):
        assert free_base_port(nodes, start=20000, stop=32768, spread=pid) == 20000


def test_a_node_count_that_cannot_fit_is_one_line_naming_what_it_needs():
    from recipe.forge.engines.verl.cpu.local_cluster import free_base_port

    with pytest.raises(ClusterError, match=r"300 nodes need 14403 consecutive ports \(48 a node\)") as refused:
        free_base_port(300, start=20000, stop=32768)
    assert "\n" not in str(refused.value)


@pytest.mark.timeout(900)
def test_the_cluster_script_on_a_fresh_machine_leaves_nothing_when_terminated(tmp_path):
    """scripts/verl_cpu_cluster.py with a home folder that has no ~/.ray (before the fix: a raw traceback, Ray
    finding no token), its token readable by its owner only, SIGTERMed once its run has started: the run and the
    cluster end, its temp folder goes (before the fix 10-12 processes outlived it, and the folders stayed). The
    same script SIGKILLed, left to the cluster's watchdog, is the reliability report's attack
    (tests/foundation/test_reliability_report.py)."""
    import signal

    from recipe.forge.engines.verl.cpu.cluster_processes import signal_the_cluster_script

    outcome = signal_the_cluster_script(signal.SIGTERM, tmp_path / "home")
    assert outcome.came_up, outcome.output
    assert outcome.token_private and not outcome.home_written
    assert outcome.processes_left == 0 and not outcome.temp_left, outcome
    assert outcome.exit_code == 128 + signal.SIGTERM and "Traceback" not in outcome.output, outcome.output

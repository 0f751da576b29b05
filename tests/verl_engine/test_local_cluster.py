"""The one-machine Ray cluster's state-API reader: an answer that is not JSON (Ray's state API prints nothing while
the dashboard starts) is a ClusterError, which waiting for the nodes retries, not a JSONDecodeError that ends the
wait at once. The Ray CLI is a stand-in script here: no cluster is started."""

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


def test_waiting_for_the_nodes_asks_again_until_its_deadline(silent_ray):
    script, calls = silent_ray
    cluster = LocalCluster(nodes=1)
    cluster.ray_cli = str(script)
    with pytest.raises(ClusterError, match="were not all alive after 2 s .*printed no JSON"):
        cluster.wait_for_nodes(timeout_s=2.0)
    assert len(calls.read_text().splitlines()) >= 2  # asked more than once

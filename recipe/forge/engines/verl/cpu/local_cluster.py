"""A Ray cluster of several nodes on one machine, brought up the way docs/gpu_cluster.md (section 4) brings one up
on several: ``ray start --head`` on the first node, then ``ray start --address=HEAD:PORT`` for each other node.

Each node is a raylet of its own with its own logical resources: ``num_cpus`` logical CPUs and ``num_gpus`` logical
GPUs (the CPU backend's verl workers are scheduled on logical ``GPU`` resources: one per rank, and verl's
placement-group bundles ask 10 CPUs each, see recipe/forge/engines/verl/cpu/settings.py). A run then joins it with
``RAY_ADDRESS=`` :attr:`LocalCluster.address` and ``trainer.nnodes`` equal to the number of nodes.

Scoped, so that it can run next to other Ray instances on the same machine: every node has its own temp folder
and its own ports (from ``base_port`` up, :func:`node_ports`; :func:`free_base_port` finds a free range for any
node count that fits below the kernel's ephemeral ports, else says how many are needed), and every process
``ray start`` brings up carries ``SLEA_RL_RAY_CLUSTER=<marker>`` in its environment (Ray's daemons and the worker
processes they start inherit it). :meth:`LocalCluster.stop` ends exactly the processes carrying its marker and
deletes its temp folder; ``ray stop`` would end every Ray process of the user on the machine, other clusters
included. A watchdog (recipe/forge/engines/verl/reaper.py) does the same when the process that started the
cluster dies, however it dies (SIGKILL included).

Authentication: Ray 2.60's token (``RAY_AUTH_MODE=token``) is the cluster's own, generated here into
``<temp folder>/auth_token``, readable by its owner only (the folder too), and given to every node and client by
``RAY_AUTH_TOKEN_PATH``: nothing depends on ``~/.ray/auth_token`` (a fresh machine has none), nothing is written
there, and another user of the machine cannot read it. Linux only (it reads /proc).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from recipe.forge.engines.verl.reaper import end_processes, processes_with, start_reaper

MARKER = "SLEA_RL_RAY_CLUSTER"
HEAD_PORTS = ("port", "ray-client-server-port", "dashboard-port")  # the head node's own
NODE_PORTS = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
              "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port",
              "min-worker-port", "max-worker-port")
WORKER_PORTS_PER_NODE = 40  # Ray's worker processes of a node bind in [min-worker-port, max-worker-port]
PORTS_PER_NODE = len(NODE_PORTS) + WORKER_PORTS_PER_NODE
READY_TIMEOUT_S = 60.0
# Ray 2.5x: ``ray start --head`` turns token authentication on, while ``ray start --address`` and ``ray.init`` of
# a driver default to it off and are refused; every node and client of the cluster says ``token`` (the token is
# the user's ~/.ray/auth_token, one file on one machine)
AUTH = {"RAY_AUTH_MODE": "token"}


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the message names the node and the command's output)."""


def node_ports(base_port: int, node: int) -> dict[str, int]:
    """The ports of node ``node`` (0 = head): the head's three from ``base_port``, then a block per node."""
    first = base_port + len(HEAD_PORTS) + node * PORTS_PER_NODE
    ports = {name: first + i for i, name in enumerate(NODE_PORTS[:-2])}
    ports["min-worker-port"] = first + len(NODE_PORTS)
    ports["max-worker-port"] = first + PORTS_PER_NODE - 1
    if node == 0:
        ports.update({name: base_port + i for i, name in enumerate(HEAD_PORTS)})
    return ports


def node_command(node: int, base_port: int, num_cpus: int, num_gpus: int, temp_root: str) -> list[str]:
    """The ``ray start`` command of node ``node`` (0: the head, with the dashboard Ray's state API reads)."""
    ports = node_ports(base_port, node)
    role = (["--head", "--include-dashboard=true", "--dashboard-host=127.0.0.1"] if node == 0
            else [f"--address=127.0.0.1:{base_port}"])
    return ["ray", "start", *role, "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
            f"--temp-dir={temp_root}/node{node}", "--disable-usage-stats",
            *(f"--{name}={port}" for name, port in ports.items())]


def ports_free(first: int, count: int) -> bool:
    """Whether ``count`` ports from ``first`` can all be bound on 127.0.0.1 now."""
    for port in range(first, first + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def ephemeral_ports_start(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port the kernel hands out for outgoing connections (a cluster's ports stay below it)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_base_port(nodes: int, start: int = 20000, stop: int | None = None, spread: int | None = None) -> int:
    """A base port whose whole range (:func:`node_ports` of ``nodes`` nodes) is free now, searched in blocks from
    a point set by ``spread`` (default: this process's pid, so that two clusters started at once seldom try the
    same block) round to where it began; ClusterError when the range cannot hold that many nodes or no block is
    free."""
    stop = min(ephemeral_ports_start(), 65536) if stop is None else stop
    count = len(HEAD_PORTS) + nodes * PORTS_PER_NODE
    blocks = list(range(start, stop - count + 1, count))
    if not blocks:
        raise ClusterError(f"{nodes} nodes need {count} consecutive ports ({PORTS_PER_NODE} a node); only "
                           f"{max(0, stop - start)} lie between {start} and {stop} (below the ephemeral ports)")
    turn = (os.getpid() if spread is None else spread) % len(blocks)
    for first in blocks[turn:] + blocks[:turn]:
        if ports_free(first, count):
            return first
    raise ClusterError(f"no {count} free consecutive ports between {start} and {stop}")


class LocalCluster:
    """``nodes`` Ray nodes on this machine (see the module docstring); a context manager that stops them."""

    def __init__(self, nodes: int = 2, num_cpus: int = 14, num_gpus: int = 1, base_port: int | None = None,
                 env: dict[str, str] | None = None):
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: a cluster has at least one node")
        self.nodes, self.num_cpus, self.num_gpus = nodes, num_cpus, num_gpus
        self.base_port = free_base_port(nodes) if base_port is None else base_port
        self.temp_root = tempfile.mkdtemp(prefix="slea_ray_", dir="/tmp")  # short: Ray's socket paths are limited
        self.token = uuid.uuid4().hex  # the marker of this cluster's processes
        self.auth_token_file = Path(self.temp_root) / "auth_token"
        descriptor = os.open(self.auth_token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as token:
            token.write(secrets.token_hex(32))  # Ray's own format: 256 random bits
        self.env = {**os.environ, **(env or {}), **AUTH, "RAY_AUTH_TOKEN_PATH": str(self.auth_token_file),
                    MARKER: self.token}  # every node process's environment
        self.env.pop("RAY_AUTH_TOKEN", None)  # it would win over the cluster's own token file
        self.watchdog: subprocess.Popen | None = None
        self.ray_cli = str(Path(sys.executable).with_name("ray"))  # this environment's Ray
        self.commands = [node_command(node, self.base_port, num_cpus, num_gpus, self.temp_root) for node in range(nodes)]

    @property
    def address(self) -> str:
        """The head node's address, for ``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address``."""
        return f"127.0.0.1:{self.base_port}"

    def node_names(self) -> dict[str, str]:
        """node_id -> ``node<i>``, ``i`` the node's position in :attr:`commands` (0 = head): :meth:`start` starts
        them one after the other, so Ray's start times order them."""
        nodes = sorted(self.alive_nodes(), key=lambda node: str(node["start_time_ms"]))  # "YYYY-MM-DD hh:mm:ss.ffffff"
        return {node["node_id"]: f"node{i}" for i, node in enumerate(nodes)}

    def placement(self) -> dict[str, list[str]]:
        """For each Ray actor class of the cluster's jobs (by its own name: verl's colocated worker class, made in a
        function, is ``create_colocated_worker_cls.<locals>.WorkerDict`` to Ray), the node name (:meth:`node_names`)
        of each of its actors, alive or dead, sorted."""
        names = self.node_names()
        where: dict[str, list[str]] = {}
        for actor in self.ray_list("actors"):
            where.setdefault(actor["class_name"].rsplit(".", 1)[-1], []).append(names.get(actor["node_id"], "unknown"))
        return {name: sorted(found) for name, found in sorted(where.items())}

    def client_env(self) -> dict[str, str]:
        """The environment a driver joins this cluster with: the nodes' (authentication mode included) and
        ``RAY_ADDRESS``."""
        return {**self.env, "RAY_ADDRESS": self.address}

    def start(self) -> LocalCluster:
        """Start the watchdog, run the ``ray start`` commands in order and wait until Ray lists every node alive."""
        self.watchdog = start_reaper(marker=f"{MARKER}={self.token}", remove=self.temp_root)
        for node, command in enumerate(self.commands):
            result = subprocess.run([self.ray_cli, *command[1:]], env=self.env, capture_output=True, text=True)
            if result.returncode != 0:
                self.stop()
                raise ClusterError(f"node {node}: `{shlex.join(command)}` exited {result.returncode}:\n"
                                   f"{(result.stdout + result.stderr)[-3000:]}")
        self.wait_for_nodes()
        return self

    def ray_list(self, kind: str, *filters: str) -> list[dict]:
        """``ray list <kind>`` (Ray's state API CLI: nodes, actors, ...) of this cluster, as dicts, detailed."""
        command = [self.ray_cli, "list", kind, f"--address={self.address}", "--format=json", "--detail",
                   "--limit=10000", *(f"--filter={f}" for f in filters)]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterError(f"`{shlex.join(command)}` exited {result.returncode}: {result.stderr[-2000:]}")
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:  # Ray's state API answers nothing while the dashboard starts
            raise ClusterError(f"`{shlex.join(command)}` printed no JSON: {result.stdout[-500:]!r} "
                               f"{result.stderr[-1500:]}") from None

    def alive_nodes(self) -> list[dict]:
        """This cluster's alive nodes, as Ray's state API lists them (node_id, is_head_node, resources_total, ...)."""
        return self.ray_list("nodes", "state=ALIVE")

    def wait_for_nodes(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline, last_error = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            try:
                if len(self.alive_nodes()) == self.nodes:
                    return
            except ClusterError as exc:  # the dashboard is still starting
                last_error = exc
            time.sleep(1.0)
        self.stop()
        raise ClusterError(f"the {self.nodes} nodes at {self.address} were not all alive after {timeout_s:.0f} s"
                           f" (last state API error: {last_error})")

    def stop(self) -> None:
        """End every process of this cluster (those carrying its marker), SIGTERM then SIGKILL, delete its temp
        folder (its token with it) and end its watchdog. Safe to call again."""
        end_processes(processes_with(f"{MARKER}={self.token}"))
        shutil.rmtree(self.temp_root, ignore_errors=True)
        if self.watchdog is not None:
            self.watchdog.terminate()
            self.watchdog.wait()
            self.watchdog = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

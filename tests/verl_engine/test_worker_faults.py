"""A Ray process of a run that dies is named, whether its death arrives as Ray's ActorDiedError (under the wrappers
of the actors it passed through) or as another failure while the process lies dead (verl's replay buffer refusing
a batch of groups that a dead server left failed): worker_faults.worker_died on a local Ray with real actors,
killed from outside with SIGKILL."""

from __future__ import annotations

import os
import signal
import time

import pytest

ray = pytest.importorskip("ray")

from recipe.forge.engines.verl.worker_faults import WorkerDiedError, first_dead, worker_died  # noqa: E402

REPLAY_BUFFER_ERROR = "Sync replay buffer selected terminal groups with no materializable trajectories"


@ray.remote(num_cpus=0)
class EchoRolloutServer:
    """Stands where a rollout server stands: answers ``generate`` with its input."""

    def pid(self) -> int:
        return os.getpid()

    def generate(self, prompt: str) -> str:
        return prompt


@ray.remote(num_cpus=0)
class AgentLoopWorkerProbe:
    """Calls a server as an agent-loop worker does: a dead server's error comes back wrapped in this call's."""

    def generate(self, server, prompt: str) -> str:
        return ray.get(server.generate.remote(prompt))


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def killed(actor) -> int:
    """SIGKILL ``actor``'s process from outside; returns its pid once Ray reports it dead."""
    pid = ray.get(actor.pid.remote())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while first_dead([actor], timeout_s=5) is None:
        assert time.monotonic() < deadline, "Ray never reported the killed actor dead"
        time.sleep(0.1)
    return pid


def test_a_dead_server_is_named_when_the_run_fails_with_another_error(local_ray):
    alive = EchoRolloutServer.options(name="slea_rl_test_server_0").remote()
    dead = EchoRolloutServer.options(name="slea_rl_test_server_1").remote()
    assert ray.get(alive.generate.remote("up")) == "up"
    pid = killed(dead)

    error = worker_died(RuntimeError(REPLAY_BUFFER_ERROR), 3, [alive, dead])
    assert isinstance(error, WorkerDiedError)
    message = str(error)
    assert message.startswith(f"rollout server slea_rl_test_server_1 (EchoRolloutServer, pid {pid}, node ")
    assert "died during iteration 3" in message and "\n" not in message

    # the same failure with every process alive is not a worker's death: the caller re-raises it as it is
    assert worker_died(RuntimeError(REPLAY_BUFFER_ERROR), 3, [alive]) is None


def test_a_death_under_another_actors_error_is_named_without_asking_the_processes(local_ray):
    server = EchoRolloutServer.options(name="slea_rl_test_server_2").remote()
    worker = AgentLoopWorkerProbe.remote()
    pid = killed(server)
    with pytest.raises(ray.exceptions.RayTaskError) as raised:  # the worker's error, the server's death inside
        ray.get(worker.generate.remote(server, "hello"))

    error = worker_died(raised.value, 5)  # no process to ask: the death is found in the chain
    assert error is not None
    assert str(error).startswith(f"rollout server slea_rl_test_server_2 (EchoRolloutServer, pid {pid}, node ")
    assert "died during iteration 5" in str(error)

"""scripts/verl_cpu_smoke.py's report of a failed run: the run's own last lines, without the copies of worker logs
that Ray prints into the driver's output after the run's verdict."""

from __future__ import annotations

LOG = """\
Training Progress:  67%|######6   | 2/3 [00:40<00:20, 20.0s/it]
worker died: rollout server slea_rl_hf_server_1 (HFRolloutServer, pid 16643, node 192.0.2.2) died during iteration 3
\x1b[36m(AgentLoopWorkerTQ pid=16962)\x1b[0m Traceback (most recent call last):\x1b[32m [repeated 4x across cluster]\x1b[0m
\x1b[36m(AgentLoopWorkerTQ pid=16962)\x1b[0m ray.exceptions.ActorDiedError: The actor died unexpectedly
(TaskRunner pid=77) an uncoloured copy
(pid=12, ip=10.0.0.2) a copy naming only the process
(raylet) a copy of the raylet's log
"""


def test_the_runs_verdict_is_kept_and_rays_copies_of_worker_logs_are_left_out(load_script):
    smoke = load_script("verl_cpu_smoke.py")
    assert smoke.driver_lines(LOG) == [
        "Training Progress:  67%|######6   | 2/3 [00:40<00:20, 20.0s/it]",
        "worker died: rollout server slea_rl_hf_server_1 (HFRolloutServer, pid 16643, node 192.0.2.2) died during "
        "iteration 3"]


def test_a_model_folder_without_a_config_is_refused_in_one_line(load_script, tmp_path):
    import pytest

    smoke = load_script("verl_cpu_smoke.py")
    with pytest.raises(SystemExit, match=f"--model {tmp_path}: not tiny, smollm2 or a model folder"):
        smoke.main(["--json", "--model", str(tmp_path), "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run" / "tiny_model").exists()  # nothing built in its place

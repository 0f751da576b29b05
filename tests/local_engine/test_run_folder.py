"""The run folder under attack (issue 23, items 1, 6 and 7): one run at a time (a real second process is refused
with the holder's pid, a killed holder's lock is taken over), checked run paths (nothing is written outside the
folder the user pointed at), nothing a run did not write is deleted or replaced, keep-last-N checkpoints, and
full or read-only disks at any save end in one line naming what was being written, the earlier checkpoint
intact. Runs here are prompt-only runs against a stub endpoint (no model to load) or direct saves."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_system.config_checks import ConfigError
from recipe.forge.testing.run_folders import HOLDER, files_under
from agent_system.testing.threaded_server import ThreadedServer
from recipe.forge.runs.durable import CheckpointError
from recipe.forge.runs.checkpoint import prune_checkpoints, save_checkpoint
from recipe.forge.main_forge import run, validate
from recipe.forge.runs.run_folder import LOCK_NAME, hold_run_folder
from recipe.forge.runs.write_faults import RunFolderError, write_fault, writing

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def endpoint():
    """An OpenAI-compatible stub endpoint that always answers ``<action>+</action>``."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/chat/completions")
    def complete(body: dict):
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "<action>+</action>"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    with ThreadedServer(app) as server:
        yield f"{server.base_url}/v1"


def _api_run(out: Path, url: str, run_overrides, *extra: str) -> list[str]:
    return run_overrides(out) + ["trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=stub",
                                 "trainer.api.timeout_s=120", *extra]


# one run at a time ------------------------------------------------------------------------------------------------



def test_a_second_run_on_a_busy_folder_is_refused_with_the_holders_pid_until_the_holder_dies(
        tmp_path, endpoint, run_overrides, compose_cfg, capsys):
    url = endpoint
    out = tmp_path / "run"
    overrides = _api_run(out, url, run_overrides)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RunFolderError) as refused:
            run(compose_cfg(overrides))
        message = str(refused.value)
        assert str(out.resolve()) in message and f"pid {holder.pid} " in message and "\n" not in message
        assert not (out / "metrics.jsonl").exists()  # refused before it wrote anything
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((out / LOCK_NAME).read_text())["pid"] == holder.pid  # the killed run's lock file is left
    capsys.readouterr()
    assert len(run(compose_cfg(overrides))) == 1  # taken over
    assert f"taking over the lock of pid {holder.pid}" in capsys.readouterr().out
    assert (out / LOCK_NAME).read_text() == ""  # released cleanly at exit
    assert [json.loads(line)["iteration"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1]


def test_a_process_cannot_hold_a_run_folder_twice(tmp_path, capsys):
    with hold_run_folder(tmp_path):
        with pytest.raises(RunFolderError, match=f"already in use by a run of this process \\(pid {os.getpid()}\\)"):
            with hold_run_folder(tmp_path / "." / ""):
                pass
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    with hold_run_folder(tmp_path):  # released on exit: nothing to take over
        assert "taking over" not in capsys.readouterr().out


def _held_by_another_process(out: Path):
    """A real second process holding ``out`` (as a run does) until the block ends."""
    import contextlib

    @contextlib.contextmanager
    def holding():
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "holding"
            yield holder.pid
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()

    return holding()


def test_each_engines_trainer_holds_the_run_folder_itself(tmp_path, endpoint, run_overrides, compose_cfg, make_tiny,
                                                          tokenizer):
    """Trainers built from Python, without the command line: the embedded trainer, the prompt-only runner and the
    verl driver are each refused on a folder another process holds, before they write anything (before the
    fix, two LocalTrainer.fit() on one folder wrote metrics lines 1,1,2,2,...)."""
    from recipe.forge.engines.api.runner import PromptOnlyRunner
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.engines.verl.main import run_verl

    out = tmp_path / "run"
    policy = build_policy(PolicyConfig(path="tiny", use_reference=True), model=make_tiny(), tokenizer=tokenizer)
    trainers = {
        "local": lambda: LocalTrainer(validate(compose_cfg(run_overrides(out))), Components(policy=policy)).fit(),
        "api": lambda: PromptOnlyRunner(validate(compose_cfg(_api_run(out, endpoint, run_overrides)))).fit(),
        "verl": lambda: run_verl(validate(compose_cfg(run_overrides(out) + ["trainer.engine=verl", "trainer.device=cpu",
                                                                            "trainer.n_gpus_per_node=1"]))),
    }
    with _held_by_another_process(out) as pid:
        for engine, fit in trainers.items():
            with pytest.raises(RunFolderError, match=f"in use by another run \\(pid {pid} "):
                fit()
            assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME], engine


def test_a_second_fit_in_another_thread_of_the_process_is_refused(tmp_path, endpoint, run_overrides, compose_cfg):
    import threading

    from recipe.forge.engines.api.runner import PromptOnlyRunner

    out = tmp_path / "run"
    runner = PromptOnlyRunner(validate(compose_cfg(_api_run(out, endpoint, run_overrides))))
    holding, release = threading.Event(), threading.Event()

    def hold():
        with hold_run_folder(out):
            holding.set()
            release.wait(60)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert holding.wait(60)
        with pytest.raises(RunFolderError, match="already in use by a run of this process"):
            runner.fit()
    finally:
        release.set()
        other.join()
    assert [row["iteration"] for row in runner.fit()] == [1]  # once the other thread let go


# checked paths ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override,key", [
    ("trainer.experiment_name=../../../escaped", "trainer.experiment_name"),
    ("trainer.project_name=a/b", "trainer.project_name"),
    ("trainer.experiment_name=..", "trainer.experiment_name"),
    ("trainer.default_local_dir=runs/x/../../../escaped", "trainer.default_local_dir"),
])
def test_a_run_path_outside_the_folder_pointed_at_is_refused_at_start_up(tmp_path, compose_cfg, override, key):
    from recipe.forge.run_config import check_run_config

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_run_config(compose_cfg([override]))


def test_the_command_line_writes_nothing_for_an_escaping_experiment_name(tmp_path):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", "trainer.experiment_name=../../../escaped"],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "trainer.experiment_name" in proc.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b"]


def test_plain_names_and_a_leading_parent_are_allowed(compose_cfg):
    from recipe.forge.run_config import check_run_config

    _, _, _, sections = check_run_config(compose_cfg(["trainer.experiment_name=seeds_forge_3.v2-x",
                                                      "trainer.default_local_dir=../elsewhere/run"]))
    assert sections["trainer"].output_dir == "../elsewhere/run"


# nothing a run did not write is deleted or replaced ---------------------------------------------------------------

def test_resume_mode_disable_refuses_a_non_checkpoint_step_folder_and_a_foreign_metrics_file(
        tmp_path, endpoint, run_overrides, compose_cfg):
    url = endpoint
    out = tmp_path / "run"
    (out / "global_step_1").mkdir(parents=True)
    (out / "global_step_1" / "notes.txt").write_text("the user's own notes")
    before = files_under(out)
    overrides = _api_run(out, url, run_overrides, "trainer.save_freq=1", "trainer.resume_mode=disable")
    with pytest.raises(RunFolderError, match="global_step_1 is named like a checkpoint but is not one"):
        run(compose_cfg(overrides))
    assert files_under(out) == before

    shutil.rmtree(out / "global_step_1")
    (out / "metrics.jsonl").write_text("step,reward\n1,0.5\n")  # someone else's file
    before = files_under(out)
    with pytest.raises(RunFolderError, match="metrics.jsonl was not written by a SLEA-RL run"):
        run(compose_cfg(overrides))
    assert files_under(out) == before

    with pytest.raises(CheckpointError, match="is not a checkpoint .* refusing to replace it"):  # a direct save too
        (out / "global_step_3").mkdir()
        (out / "global_step_3" / "mine.txt").write_text("x")
        save_checkpoint(out, 3, rng={})
    assert (out / "global_step_3" / "mine.txt").read_text() == "x"


def test_max_actor_ckpt_to_keep_keeps_the_newest_checkpoints_it_wrote(tmp_path, endpoint, run_overrides,
                                                                      compose_cfg):
    url = endpoint
    out = tmp_path / "run"
    (out / "global_step_1_notes").mkdir(parents=True)  # not a checkpoint's name: never touched
    run(compose_cfg(_api_run(out, url, run_overrides, "trainer.total_training_steps=3", "trainer.save_freq=1",
                             "trainer.max_actor_ckpt_to_keep=2")))
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("global_step")) == [
        "global_step_1_notes", "global_step_2", "global_step_3"]
    assert not [p for p in out.iterdir() if p.name.startswith(".global_step")]  # no half-deleted leftovers
    # a folder with a trainer state naming another iteration was not written as this checkpoint: kept
    (out / "global_step_1").mkdir()
    (out / "global_step_1" / "trainer_state.json").write_text('{"iteration": 7}')
    assert prune_checkpoints(out, 1) == [out / "global_step_2"]
    assert sorted(p.name for p in out.glob("global_step_?")) == ["global_step_1", "global_step_3"]


def test_max_actor_ckpt_to_keep_is_checked(compose_cfg):
    from recipe.forge.run_config import check_run_config

    with pytest.raises(ConfigError, match=r"trainer\.max_actor_ckpt_to_keep"):
        check_run_config(compose_cfg(["trainer.max_actor_ckpt_to_keep=0"]))


# failed writes are one line ---------------------------------------------------------------------------------------

SAVER = textwrap.dedent("""
    import json, resource, signal, subprocess, sys
    from pathlib import Path
    from recipe.forge.testing.run_folders import TwoWriterPolicy
    from recipe.forge.runs.checkpoint import load_checkpoint, save_checkpoint
    from recipe.forge.runs.tracking import MetricsTracker
    from recipe.forge.runs.durable import write_text_atomic
    from recipe.forge.runs.write_faults import RunFolderError

    out = Path(sys.argv[1])
    policy = TwoWriterPolicy()
    tracker = MetricsTracker(out, [], "p", "e")
    tracker.log(1, {"x": 1.0})
    save_checkpoint(out, 1, policy=policy, rng={})
    report = {}
    for fault in sys.argv[2].split(","):
        if fault == "fsize":  # a file-size limit: every write past 64 KiB fails with EFBIG, like a full disk
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        elif fault == "readonly":
            subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
        # "full": the small tmpfs the folder is has no room for a second checkpoint
        errors = []
        for write in (lambda: save_checkpoint(out, 2, policy=policy, rng={}),
                      lambda: tracker.log(2, {f"metric_{i}": 1.0 for i in range(5000)}),  # a 100 KB line
                      lambda: write_text_atomic(out / "forge_library" / "experience_library.json", "z" * 8_000_000)):
            try:
                write()
                errors.append(None)
            except RunFolderError as exc:
                errors.append(str(exc))
        if fault == "fsize":
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        report[fault] = errors
    state = load_checkpoint(out / "global_step_1", policy=policy, rng={})
    left = sorted(p.name for p in out.iterdir())
    print(json.dumps({"errors": report, "iteration": state["iteration"], "left": left}))
""")


def _check_fault_report(report: dict, out: Path, fault: str, fault_text: str) -> None:
    checkpoint, metrics, library = report["errors"][fault]
    assert checkpoint.startswith(f"cannot write the checkpoint of iteration 2 to {out / 'global_step_2'}: "
                                 f"{fault_text}") and "the previous checkpoint global_step_1 is intact" in checkpoint
    assert metrics is None or metrics.startswith(f"cannot write the metrics of iteration 2 to {out / 'metrics.jsonl'}")
    assert library.startswith(f"cannot write {out / 'forge_library' / 'experience_library.json'}: {fault_text}")
    assert all("\n" not in e for e in report["errors"][fault] if e)
    assert report["iteration"] == 1  # the previous checkpoint loads
    assert "global_step_2" not in report["left"] and not [n for n in report["left"] if n.endswith(".tmp")]


def test_a_file_size_limit_at_every_save_is_one_line_and_the_previous_checkpoint_is_intact(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SAVER, str(tmp_path), "fsize"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    _check_fault_report(report, tmp_path, "fsize", "File too large (errno 27)")
    assert report["errors"]["fsize"][1] is not None  # a 100 KB metrics line passes the limit too


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="needs user and mount namespaces (unshare) for a small tmpfs")
def test_a_full_then_read_only_tmpfs_at_every_save_is_one_line(tmp_path):
    out = tmp_path / "tmpfs"
    out.mkdir()
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    shell = f'mount -t tmpfs -o size=6m tmpfs "{out}" && exec "{sys.executable}" "{script}" "{out}" full,readonly'
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", shell], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    _check_fault_report(report, out, "full", "No space left on device (errno 28)")
    _check_fault_report(report, out, "readonly", "Read-only file system (errno 30)")


def test_write_faults_are_recognised_however_a_library_reports_them():
    ray_exceptions = pytest.importorskip("ray.exceptions")
    full = OSError(28, "No space left on device", "/data/run/global_step_4/actor/model.pt")
    remote = ray_exceptions.RayTaskError("save_checkpoint", "Traceback ...\nOSError: [Errno 28] ...", full)
    assert write_fault(remote) == "No space left on device (errno 28) at /data/run/global_step_4/actor/model.pt"
    assert write_fault(Exception("No space left on device (os error 28)")) == "No space left on device (errno 28)"
    assert write_fault(RuntimeError("Error while serializing: I/O error: Read-only file system (os error 30)")) == \
        "Read-only file system (errno 30)"
    assert write_fault(PermissionError(13, "Permission denied", "/r/metrics.jsonl")) == \
        "Permission denied (errno 13) at /r/metrics.jsonl"
    assert write_fault(ValueError("shape mismatch")) is None
    assert write_fault(PermissionError(1, "Operation not permitted")) is None  # os.kill on another's process
    # raised in a Ray actor (the verl engine's trainer): the entry point keeps its one line, not the traceback
    inner = RunFolderError("cannot write /r/global_step_2/forge_library/x.json: No space left on device (errno 28)")
    wrapped = ray_exceptions.RayTaskError("fit", "Traceback (most recent call last):\n  ...", inner)
    wrapped = wrapped.as_instanceof_cause()
    with pytest.raises(RunFolderError) as caught, writing("the run's files", "/r", redescribe=False):
        raise wrapped
    assert str(caught.value) == str(inner)
    assert write_fault(OSError(2, "No such file or directory")) is None  # not a refused write

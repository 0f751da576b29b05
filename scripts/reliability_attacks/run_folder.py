"""Attacks for scripts/reliability_report.py (issue 23, defects 1, 6 and 7): the run folder.

* attack_run_folder_lock: a real second process holds a run folder (recipe.forge.runs.run_folder.hold_run_folder,
  what main_forge.run takes for every engine) while a run (main_forge.run, prompt-only engine) starts on it;
  then the holder is SIGKILLed and the next run must take the stale lock over.
* attack_disk_faults: trainer checkpoints (tokenizers + safetensors writers, library file), metrics lines and
  library files written under a file-size limit (RLIMIT_FSIZE, EFBIG: a full disk for every user) and, where
  user and mount namespaces work (unshare), on a full 6 MB tmpfs (ENOSPC) and the same tmpfs remounted
  read-only (EROFS). Each failed write must be a RunFolderError of one line naming the path, and the previous
  checkpoint must load afterwards.
* attack_escaping_paths: project / experiment names and run folders that climb out (``../../x``, ``a/b``,
  ``..``, ``runs/x/../../../y``, control characters), through the command line from a scratch tree: nothing
  may be written anywhere (Hydra's record included), and the exit status is 2 with one line.
* attack_foreign_folders: resume_mode=disable (and auto) on folders holding a ``global_step_<k>`` that is not a
  checkpoint (with the user's files in it), a foreign ``metrics.jsonl``, a file named ``global_step_2``; a
  direct save over a foreign folder; keep-last-N pruning next to foreign folders. No user file may be deleted
  or changed.

all_caught condition (over the merged dicts):
    r["lock_runs_refused"] == r["lock_attempts"] and r["lock_refusals_naming_pid"] == r["lock_attempts"]
    and r["stale_locks_taken_over"] == r["stale_attempts"]
    and r["write_fault_clean_errors"] == r["write_fault_attempts"] and r["write_fault_tracebacks"] == 0
    and r["previous_checkpoint_intact"] == r["write_fault_runs"]
    and r["paths_refused"] == r["path_attacks"] and r["writes_outside_run_folder"] == 0
    and r["foreign_refused"] == r["foreign_attacks"] and r["user_files_deleted"] == 0 and r["user_files_changed"] == 0
A test should assert exactly that (before the fix: the second run ran, 0 refused; raw OSError / SafetensorError /
tokenizers Exception tracebacks; ``../../../escaped`` wrote the run three levels up; global_step_1 with the
user's files deleted and a foreign metrics.jsonl replaced).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from recipe.forge.testing.run_folders import HOLDER, files_under
from reliability_attacks import REPO, compose_shipped

def _api_run(out: Path, *extra: str) -> list[str]:
    """A tiny prompt-only run whose endpoint does not answer: a run that is not refused fails at its first
    request, within seconds, instead of training."""
    return ["env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3",
            "env.rollout.n=2", "data.train_batch_size=2", "data.val_batch_size=1", "trainer.total_training_steps=1",
            "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.local.progress=false",
            "trainer.logger=[jsonl]", f"trainer.default_local_dir={out}", f"algorithm.forge.checkpoint_dir={out}/library",
            "trainer.engine=api", "trainer.api.base_url=http://127.0.0.1:9/v1", "trainer.api.model=none",
            "trainer.api.timeout_s=2", *extra]


def attack_run_folder_lock(quick: bool) -> dict:
    from recipe.forge.main_forge import run
    from recipe.forge.runs.run_folder import hold_run_folder

    counts = {"lock_attempts": 0, "lock_runs_refused": 0, "lock_refusals_naming_pid": 0, "stale_attempts": 0,
              "stale_locks_taken_over": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(1 if quick else 5):
            out = Path(tmp) / f"run{attempt}"
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE,
                                      text=True)
            try:
                if holder.stdout.readline().strip() != "holding":
                    continue
                counts["lock_attempts"] += 1
                try:
                    run(compose_shipped(_api_run(out)))
                except Exception as exc:  # noqa: BLE001 - any other failure is a run that was not refused
                    message = str(exc)
                    if "in use by another run" in message and str(out.resolve()) in message:
                        counts["lock_runs_refused"] += 1
                        counts["lock_refusals_naming_pid"] += f"pid {holder.pid} " in message
            finally:
                holder.send_signal(signal.SIGKILL)
                holder.wait()
            counts["stale_attempts"] += 1
            try:
                with hold_run_folder(out):
                    counts["stale_locks_taken_over"] += 1
            except Exception:  # noqa: BLE001 - a stale lock that blocks the next run
                pass
    return counts


SAVER = textwrap.dedent("""
    import json, resource, signal, subprocess, sys
    from pathlib import Path
    from recipe.forge.testing.run_folders import TwoWriterPolicy
    from recipe.forge.runs.checkpoint import load_checkpoint, save_checkpoint
    from recipe.forge.runs.tracking import MetricsTracker
    from recipe.forge.runs.durable import write_text_atomic

    out, policy = Path(sys.argv[1]), TwoWriterPolicy()
    tracker = MetricsTracker(out, [], "p", "e")
    tracker.log(1, {"x": 1.0})
    save_checkpoint(out, 1, policy=policy, rng={})
    report = {}
    for fault in sys.argv[2].split(","):
        if fault == "fsize":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        elif fault == "readonly":
            subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
        results = []
        for what, write in (
                (str(out / "global_step_2"), lambda: save_checkpoint(out, 2, policy=policy, rng={})),
                (str(out / "metrics.jsonl"), lambda: tracker.log(2, {f"metric_{i}": 1.0 for i in range(5000)})),
                (str(out / "forge_library"), lambda: write_text_atomic(out / "forge_library" / "lib.json", "z" * 8_000_000))):
            try:
                write()
                results.append({"what": what, "error": None})
            except Exception as exc:
                results.append({"what": what, "error": str(exc), "type": type(exc).__name__})
        if fault == "fsize":
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        report[fault] = results
    try:
        intact = load_checkpoint(out / "global_step_1", policy=policy, rng={})["iteration"] == 1
    except Exception:
        intact = False
    print(json.dumps({"results": report, "intact": intact}))
""")


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode == 0


def attack_disk_faults(quick: bool) -> dict:
    counts = {"write_fault_runs": 0, "write_fault_attempts": 0, "write_fault_clean_errors": 0,
              "write_fault_tracebacks": 0, "previous_checkpoint_intact": 0, "write_fault_kinds": 0}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "saver.py"
        script.write_text(SAVER)
        runs = [("fsize", None)]
        if _namespaces_work():
            runs.append(("full,readonly", "6m"))
        for faults, tmpfs in runs:
            out = Path(tmp) / faults.replace(",", "_")
            out.mkdir()
            command = [sys.executable, str(script), str(out), faults]
            if tmpfs:
                shell = f'mount -t tmpfs -o size={tmpfs} tmpfs "{out}" && exec "{sys.executable}" "{script}" "{out}" {faults}'
                command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", shell]
            proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
            counts["write_fault_runs"] += 1
            counts["write_fault_kinds"] += len(faults.split(","))  # fsize; full, readonly where namespaces work
            if proc.returncode != 0:
                counts["write_fault_tracebacks"] += 1
                continue
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            counts["previous_checkpoint_intact"] += report["intact"]
            for results in report["results"].values():
                for result in results:
                    if result["error"] is None:
                        continue  # the write fitted (a metrics line after the failed checkpoint freed its space)
                    counts["write_fault_attempts"] += 1
                    clean = (result["type"] == "RunFolderError" and "\n" not in result["error"]
                             and result["what"] in result["error"])
                    counts["write_fault_clean_errors"] += clean
                    counts["write_fault_tracebacks"] += not clean
    return counts


BAD_PATHS = [
    "trainer.experiment_name=../../../escaped", "trainer.project_name=a/b", "trainer.experiment_name=..",
    "trainer.default_local_dir=runs/x/../../../escaped", "trainer.experiment_name=/abs", "trainer.project_name=.",
]


def attack_escaping_paths(quick: bool) -> dict:
    from agent_system.config_checks import ConfigError
    from recipe.forge.run_config import check_run_config

    counts = {"path_attacks": 0, "paths_refused": 0, "writes_outside_run_folder": 0, "path_cli_runs": 0}
    for override in BAD_PATHS:  # in process: the start-up check
        counts["path_attacks"] += 1
        try:
            check_run_config(compose_shipped(override.split()))
        except ConfigError:
            counts["paths_refused"] += 1
    for override in BAD_PATHS[:1] if quick else BAD_PATHS[:4]:  # from the command line: nothing written at all
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp) / "a" / "b" / "c"
            cwd.mkdir(parents=True)
            proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", *override.split()], cwd=cwd,
                                  capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
            counts["path_attacks"] += 1
            counts["path_cli_runs"] += 1
            one_line = len(proc.stderr.strip().splitlines()) == 1
            counts["paths_refused"] += proc.returncode == 2 and one_line
            made = {p.relative_to(tmp).as_posix() for p in Path(tmp).rglob("*")} - {"a", "a/b", "a/b/c"}
            counts["writes_outside_run_folder"] += len(made)  # refused at start-up: nothing may be written
    return counts


def attack_foreign_folders(quick: bool) -> dict:
    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.runs.checkpoint import prune_checkpoints, save_checkpoint
    from recipe.forge.main_forge import run

    counts = {"foreign_attacks": 0, "foreign_refused": 0, "user_files_deleted": 0, "user_files_changed": 0}

    def planted(out: Path, kind: str) -> None:
        out.mkdir(parents=True)
        if kind == "step_folder":
            (out / "global_step_1").mkdir()
            (out / "global_step_1" / "notes.txt").write_text("the user's notes")
        elif kind == "step_file":
            (out / "global_step_2").write_text("a file, not a folder")
        elif kind == "metrics":
            (out / "metrics.jsonl").write_text("step,reward\n1,0.5\n")
        elif kind == "metrics_json":
            (out / "metrics.jsonl").write_text('{"loss": 1}\n{"loss": 2}\n')

    def tally(out: Path, before: dict[str, bytes]) -> None:
        after = files_under(out)
        counts["user_files_deleted"] += len(set(before) - set(after))
        counts["user_files_changed"] += sum(1 for k in before if k in after and after[k] != before[k])

    kinds = ["step_folder", "step_file", "metrics", "metrics_json"]
    modes = ["disable"] if quick else ["disable", "auto"]
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            for kind in kinds:
                out = Path(tmp) / f"{mode}_{kind}"
                planted(out, kind)
                before = files_under(out)
                counts["foreign_attacks"] += 1
                try:
                    run(compose_shipped(_api_run(out, "trainer.save_freq=1", f"trainer.resume_mode={mode}")))
                except Exception as exc:  # noqa: BLE001
                    counts["foreign_refused"] += type(exc).__name__ == "RunFolderError"
                tally(out, before)
        out = Path(tmp) / "direct"
        planted(out, "step_folder")
        before = files_under(out)
        counts["foreign_attacks"] += 1
        try:
            save_checkpoint(out, 1, rng={})
        except CheckpointError:
            counts["foreign_refused"] += 1
        tally(out, before)
        out = Path(tmp) / "prune"
        out.mkdir()
        for k in (1, 2, 3):
            save_checkpoint(out, k, rng={})
        (out / "global_step_0").mkdir()
        (out / "global_step_0" / "notes.txt").write_text("not a checkpoint")
        (out / "global_step_9").mkdir()
        (out / "global_step_9" / "trainer_state.json").write_text('{"iteration": 4}')  # not this folder's state
        before = {k: v for k, v in files_under(out).items() if k.startswith(("global_step_0", "global_step_9"))}
        counts["foreign_attacks"] += 1
        prune_checkpoints(out, 1)
        counts["foreign_refused"] += sorted(p.name for p in out.glob("global_step_*")) == [
            "global_step_0", "global_step_3", "global_step_9"]
        tally(out, before)
    return counts

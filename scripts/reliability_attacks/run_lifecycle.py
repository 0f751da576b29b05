"""Attacks for scripts/reliability_report.py (issue 35, items 7 and 10): runs that end as a silent success, and
trainers started from Python on a folder another run holds.

* attack_garbage_endpoint: a prompt-only run against an endpoint that answers every request with text holding no
  action. ``silent_successes`` counts runs that ended without an error saying so.
* attack_trainer_lock: while another process holds the run folder, the embedded trainer's ``fit()``, the
  prompt-only runner's ``fit()`` and the verl engine's ``run_verl`` are started from Python (no command line), and
  a second ``fit()`` from another thread of a process that holds it. ``runs_in_parallel`` counts those that were
  not refused before writing anything.

* attack_finished_folder_rerun: a finished run's folder (a prompt-only run of one iteration, its checkpoint and
  metrics) gets a second run, on a fresh copy each time: the same command, the same with
  ``trainer.resume_mode=disable`` and the same with one more iteration. ``earlier_files_lost`` counts files of the
  finished run (checkpoint, metrics line) no longer found byte for byte, in the folder or moved under
  ``earlier_runs/``; ``second_runs_unsaid`` the second runs whose first line did not say what happened to it.

all_caught condition: see ATTACKS; before the fixes: exit 0 with every reply malformed; the trainers ran on the
held folder (two fits interleaved metrics lines 1,1,2,2,...); a second run started at iteration 0 and replaced the
finished run's checkpoint and metrics without a word.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from reliability_attacks import REPO, Attack, compose_shipped


def attack_garbage_endpoint(quick: bool) -> dict:
    from agent_system.testing.chat_stub import ChatStub
    from agent_system.testing.threaded_server import ThreadedServer
    from recipe.forge.engines.api.retry import EndpointError
    from recipe.forge.main_forge import run
    from recipe.forge.testing.received import tiny_api_run

    counts = {"garbage_runs": 1, "garbage_said": 0, "silent_successes": 0}
    with tempfile.TemporaryDirectory() as tmp, ThreadedServer(ChatStub(lambda: "garbage"), log_level="critical") as s:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run(compose_shipped(tiny_api_run(Path(tmp) / "run", f"{s.base_url}/v1")))
            counts["silent_successes"] += 1
        except EndpointError as exc:
            counts["garbage_said"] += "held a valid action" in str(exc) and "\n" not in str(exc)
    return counts


def attack_trainer_lock(quick: bool) -> dict:
    from agent_system.testing.chat_stub import ChatStub
    from agent_system.testing.threaded_server import ThreadedServer
    from recipe.forge.engines.api.runner import PromptOnlyRunner
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.engines.verl.main import run_verl
    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.main_forge import validate
    from recipe.forge.runs.run_folder import hold_run_folder
    from recipe.forge.runs.write_faults import RunFolderError
    from recipe.forge.testing.received import tiny_api_run, tiny_run
    from recipe.forge.testing.run_folders import HOLDER

    counts = {"lock_trainer_attempts": 0, "lock_trainers_refused": 0, "runs_in_parallel": 0}
    with tempfile.TemporaryDirectory() as tmp, ThreadedServer(ChatStub(lambda: "ok"), log_level="critical") as s:
        out = Path(tmp) / "run"
        url = f"{s.base_url}/v1"
        trainers = [
            lambda: LocalTrainer(validate(compose_shipped(tiny_run(out))),
                                 Components(policy=script_policy("tiny", tiny=True))).fit(),
            lambda: PromptOnlyRunner(validate(compose_shipped(tiny_api_run(out, url)))).fit(),
            lambda: run_verl(validate(compose_shipped(tiny_run(out, "trainer.engine=verl", "trainer.device=cpu")))),
        ]
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE,
                                  text=True)
        try:
            holder.stdout.readline()
            for fit in trainers:
                counts["lock_trainer_attempts"] += 1
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        fit()
                    counts["runs_in_parallel"] += 1
                except RunFolderError as exc:
                    counts["lock_trainers_refused"] += f"pid {holder.pid} " in str(exc)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()

        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with hold_run_folder(out):
                holding.set()
                release.wait(120)

        other = threading.Thread(target=hold)
        other.start()
        holding.wait(120)
        counts["lock_trainer_attempts"] += 1
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                trainers[1]()
            counts["runs_in_parallel"] += 1
        except RunFolderError as exc:
            counts["lock_trainers_refused"] += "already in use by a run of this process" in str(exc)
        finally:
            release.set()
            other.join()
    return counts


def attack_finished_folder_rerun(quick: bool) -> dict:
    from agent_system.testing.chat_stub import ChatStub
    from agent_system.testing.threaded_server import ThreadedServer
    from recipe.forge.main_forge import run
    from recipe.forge.testing.received import tiny_api_run

    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                if p.is_file() and (p.name == "metrics.jsonl" or "global_step_" in str(p.relative_to(folder)))}

    counts = {"second_runs": 0, "second_runs_unsaid": 0, "earlier_files_lost": 0}
    seconds = (([], "is complete"), (["trainer.resume_mode=disable"], "held an earlier run"),
               (["trainer.total_training_steps=2"], "resuming from"))
    with tempfile.TemporaryDirectory() as tmp, ThreadedServer(ChatStub(lambda: "ok"), log_level="critical") as s:
        finished = Path(tmp) / "finished"
        with contextlib.redirect_stdout(io.StringIO()):
            run(compose_shipped(tiny_api_run(finished, f"{s.base_url}/v1")))
        earlier = files(finished)
        for number, (extra, said) in enumerate(seconds):
            out = Path(tmp) / f"second_{number}"
            shutil.copytree(finished, out)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                run(compose_shipped(tiny_api_run(out, f"{s.base_url}/v1", *extra)))
            counts["second_runs"] += 1
            counts["second_runs_unsaid"] += said not in printed.getvalue().splitlines()[0]
            moved = [files(folder) for folder in sorted(out.glob("earlier_runs/*"))]
            now = files(out)
            for name, content in earlier.items():
                kept = now.get(name) == content or any(m.get(name) == content for m in moved)
                if name == "metrics.jsonl" and not kept:  # continued: the finished run's lines come first
                    kept = now.get(name, b"").startswith(content) or any(
                        m.get(name, b"").startswith(content) for m in moved)
                counts["earlier_files_lost"] += not kept
    return counts


ATTACKS = [
    Attack(attack_garbage_endpoint, lambda r: r["garbage_said"] == r["garbage_runs"] and r["silent_successes"] == 0,
           {"runs_lost_or_mistaken": ("silent_successes",)}),
    Attack(attack_trainer_lock,
           lambda r: r["lock_trainers_refused"] == r["lock_trainer_attempts"] > 0 and r["runs_in_parallel"] == 0,
           {"runs_lost_or_mistaken": ("runs_in_parallel",)}),
    Attack(attack_finished_folder_rerun,
           lambda r: r["second_runs"] == 3 and r["second_runs_unsaid"] == 0 and r["earlier_files_lost"] == 0,
           {"runs_lost_or_mistaken": ("earlier_files_lost", "second_runs_unsaid")}),
]

"""Attacks for scripts/reliability_report.py (issue 35, items 1, 2, 3, 6, 8 and 11): a received checkpoint or run
folder on ``slea-rl eval``, ``slea-rl export`` and a resume.

* attack_checkpoint_code: planted pickles (unpickling one creates a marker file) in a verl checkpoint's actor shard
  (export, eval), in verl's extra_state / optim shards and data.pt read in the environment of a verl run's Ray
  processes (what verl's checkpoint manager loads on resume, with weights_only=False), in the embedded engine's
  optimizer.pt and critic.pt (a resume). ``checkpoint_code_ran`` counts markers created.
* attack_received_records: a run folder whose newest started Hydra record names another endpoint, an
  ``api_key_env`` holding a secret, ``${oc.env:...}`` values, a ``_target_`` and ``hydra.searchpath``, evaluated;
  a record whose config interpolates the secret, exported; a record of nested YAML aliases, exported (in a
  subprocess, with a time limit); commands refused on a held folder and for a bad key, then the folder's
  record read back. ``secrets_sent_or_written`` counts the secret reaching the other endpoint, a request or a
  manifest; ``records_mistaken`` a refused command's record taken for the run's; ``record_hangs`` time limits hit.
* attack_outputs: eval's ``--out`` at the checkpoint, inside it, at its run folder, at a file, under a file and at
  a folder of the user's; export's ``--out`` inside the run folder and ``--force`` over an export with a file
  added and one changed; eval of three kinds of damaged weights. ``outputs_played_before_refusal`` counts
  refusals that came after episodes were played, ``user_files_lost`` files of the user's deleted or changed.

all_caught condition: see ATTACKS (each attack's ``caught``); before the fixes: the shard's pickle ran in both
commands, the other endpoint received ``Authorization: Bearer <secret>``, the manifest held the secret, the alias
bomb hung, the refused Sokoban command's record was the run's, an unwritable --out failed after a pass, --force
deleted the user's files and damaged weights were tracebacks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from reliability_attacks import REPO, Attack, clean_refusal, compose_shipped

SECRET = "s3cr3t-of-the-victim"


def _quiet(command, *argv) -> tuple[int, str]:
    """A command's main(argv) in this process: (exit status, stderr); an escaping exception is status -1 with its
    traceback as stderr."""
    import traceback

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = command(list(map(str, argv)))
        except Exception:  # noqa: BLE001 - the finding
            traceback.print_exc(file=err)
            code = -1
    return code, err.getvalue()


def _tiny_model(root: Path) -> str:
    from recipe.forge.hf.tiny import save_tiny_model_dir

    with contextlib.redirect_stderr(io.StringIO()):
        return save_tiny_model_dir(root / "model")


def attack_checkpoint_code(quick: bool) -> dict:
    import torch

    from recipe.forge.commands.eval.evaluate import main as eval_main
    from recipe.forge.commands.export import main as export
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.main_forge import validate
    from recipe.forge.runs.checkpoint import load_checkpoint, save_checkpoint
    from recipe.forge.testing.received import plant_code, tiny_run, write_verl_checkpoint

    counts = {"checkpoint_code_attacks": 0, "checkpoint_code_refused": 0, "checkpoint_code_ran": 0,
              "checkpoint_code_tracebacks": 0}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        marker = root / "code_ran"
        checkpoint = write_verl_checkpoint(root / "run" / "global_step_1", _tiny_model(root))
        plant_code(checkpoint / "actor" / "model_world_size_1_rank_0.pt", marker)
        for command, argv in ((export, [checkpoint, "--out", root / "export"]),
                              (eval_main, [checkpoint, "--tasks", 1, "--samples", 1, "--no-progress", "--out",
                                           root / "eval"])):
            counts["checkpoint_code_attacks"] += 1
            code, err = _quiet(command, *argv)
            counts["checkpoint_code_refused"] += code == 2 and "posix.system" in err and clean_refusal(err)
            counts["checkpoint_code_tracebacks"] += "Traceback" in err

        # what verl's checkpoint manager and trainer load on resume, in the environment of the run's Ray processes
        cfg = prepare_verl_config(validate(compose_shipped(tiny_run(root / "verl_run", "trainer.engine=verl",
                                                                    "trainer.device=cpu"))))
        env = {**os.environ, **dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars), "PYTHONPATH": str(REPO)}
        names = ["extra_state_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt", "data.pt"]
        for name in names[:1] if quick else names:
            plant_code(root / name, marker)
            probe = ("import sys, torch, verl\n"
                     "try:\n    torch.load(sys.argv[1], weights_only=False)\n"
                     "except Exception as exc:\n    print('refused', type(exc).__name__)\n")
            proc = subprocess.run([sys.executable, "-c", probe, str(root / name)], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=600)
            counts["checkpoint_code_attacks"] += 1
            counts["checkpoint_code_refused"] += proc.stdout.strip() == "refused UnpicklingError"
            counts["checkpoint_code_tracebacks"] += proc.returncode != 0

        # the embedded engine's resume
        for name in ("optimizer.pt", "critic.pt"):
            model = torch.nn.Linear(2, 2)
            optimizer = torch.optim.AdamW(model.parameters())
            parts = {"optimizer": optimizer, "critic": model, "critic_optimizer": torch.optim.AdamW(model.parameters())}
            saved = save_checkpoint(root / f"local_{name}", 1, rng={}, **parts)
            plant_code(saved / name, marker)
            counts["checkpoint_code_attacks"] += 1
            try:
                load_checkpoint(saved, rng={}, **parts)
            except Exception as exc:  # noqa: BLE001
                counts["checkpoint_code_refused"] += type(exc).__name__ == "CheckpointError"
        counts["checkpoint_code_ran"] = int(marker.exists())
    return counts


def attack_received_records(quick: bool) -> dict:
    from agent_system.testing.chat_stub import ChatStub
    from agent_system.testing.threaded_server import ThreadedServer
    from recipe.forge.commands.eval.evaluate import main as eval_main
    from recipe.forge.commands.export import main as export
    from recipe.forge.main_forge import run
    from recipe.forge.runs.records import newest_record
    from recipe.forge.testing.received import alias_bomb, tiny_api_run, write_record
    from recipe.forge.testing.run_folders import HOLDER

    counts = {"record_attacks": 0, "records_refused_or_left_out": 0, "secrets_sent_or_written": 0,
              "records_mistaken": 0, "record_hangs": 0, "record_tracebacks": 0}
    os.environ["VICTIM_SECRET"] = SECRET
    mine, theirs = ChatStub(lambda: "ok"), ChatStub(lambda: "ok")
    try:
        with tempfile.TemporaryDirectory() as tmp, ThreadedServer(mine, log_level="critical") as a, \
                ThreadedServer(theirs, log_level="critical") as b:
            root = Path(tmp)
            out = root / "run"
            with contextlib.redirect_stdout(io.StringIO()):
                run(compose_shipped(tiny_api_run(out, f"{a.base_url}/v1")))
            write_record(out, ["trainer.engine=api", f"trainer.api.base_url={b.base_url}/v1",
                               "trainer.api.api_key_env=VICTIM_SECRET", "trainer.api.model=${oc.env:VICTIM_SECRET}",
                               "actor_rollout_ref.model._target_=builtins.print", "hydra.searchpath=[file:///tmp]"],
                         config="trainer:\n  api:\n    model: ${oc.env:VICTIM_SECRET}\n    base_url: "
                                "https://user:pw@example.org/v1\n  wandb_api_key: wandb-key-of-the-victim\n")
            mine.headers.clear()
            mine.bodies.clear()
            argv = [out / "global_step_1", "--tasks", 1, "--samples", 1, "--no-progress"]
            for extra in ([], [f"trainer.api.base_url={a.base_url}/v1"]):
                counts["record_attacks"] += 1
                code, err = _quiet(eval_main, *argv, *extra)
                counts["records_refused_or_left_out"] += code == (0 if extra else 2) and SECRET not in err
                counts["record_tracebacks"] += "Traceback" in err
            counts["record_attacks"] += 1
            code, err = _quiet(export, out / "global_step_1", "--out", root / "export")
            manifest = (root / "export" / "manifest.json").read_text() if code == 0 else ""
            counts["records_refused_or_left_out"] += code == 0 and "${oc.env:VICTIM_SECRET}" in manifest
            counts["secrets_sent_or_written"] += sum(secret in manifest for secret in (SECRET, "user:pw",
                                                                                      "wandb-key-of-the-victim"))
            counts["secrets_sent_or_written"] += theirs.sent.total() + sum(
                SECRET in json.dumps(entry) for entry in (*mine.headers, *mine.bodies))

            write_record(out, [], config=alias_bomb(), name="2026-01-02_00-00-00_000000")
            counts["record_attacks"] += 1
            try:
                proc = subprocess.run([sys.executable, "-m", "recipe.forge.commands.export", str(out / "global_step_1"),
                                       "--out", str(root / "export2")], cwd=REPO, capture_output=True, text=True,
                                      timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
                counts["records_refused_or_left_out"] += proc.returncode == 0 and "anchors or aliases" in proc.stderr
                counts["record_tracebacks"] += "Traceback" in proc.stderr
            except subprocess.TimeoutExpired:
                counts["record_hangs"] += 1

            # commands refused on a held folder (and, in full, for a bad key): their records are never the run's
            held = root / "held"
            with contextlib.redirect_stdout(io.StringIO()):
                run(compose_shipped(tiny_api_run(held, f"{a.base_url}/v1")))
            started = write_record(held, tiny_api_run(held, f"{a.base_url}/v1"))
            command = [sys.executable, "-m", "recipe.forge.main_forge", *tiny_api_run(held, f"{a.base_url}/v1"),
                       "env.env_name=sokoban"]
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(held)], cwd=REPO, stdout=subprocess.PIPE,
                                      text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
            try:
                holder.stdout.readline()
                refusals = [subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)]
            finally:
                holder.send_signal(signal.SIGKILL)
                holder.wait()
            if not quick:
                refusals.append(subprocess.run(command + ["env.rollout.n=0"], cwd=REPO, capture_output=True,
                                               text=True, timeout=600))
            for refused in refusals:
                counts["record_attacks"] += 1
                counts["records_refused_or_left_out"] += refused.returncode == 2 and clean_refusal(refused.stderr)
                counts["record_tracebacks"] += "Traceback" in refused.stderr
            counts["records_mistaken"] += newest_record(held) != started / ".hydra"
    finally:
        os.environ.pop("VICTIM_SECRET", None)
    return counts


def _local_checkpoint(root: Path) -> tuple[Path, list[str]]:
    """One iteration of a tiny Llama on NumberLine, checkpointed; (the checkpoint, the run's overrides)."""
    from recipe.forge.main_forge import run
    from recipe.forge.testing.received import tiny_run

    overrides = tiny_run(root / "run", f"actor_rollout_ref.model.path={_tiny_model(root)}")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run(compose_shipped(overrides))
    return root / "run" / "global_step_1", overrides


def attack_outputs(quick: bool) -> dict:
    from recipe.forge.commands.eval.evaluate import main as eval_main
    from recipe.forge.commands.export import main as export
    from recipe.forge.testing.received import DAMAGED_WEIGHTS, damaged_copy
    from recipe.forge.testing.run_folders import files_under

    counts = {"output_attacks": 0, "outputs_refused": 0, "outputs_played_before_refusal": 0, "user_files_lost": 0,
              "damaged_weights": 0, "damaged_weights_one_line": 0, "output_tracebacks": 0}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint, overrides = _local_checkpoint(root)
        (root / "a_file").write_text("x")
        (root / "busy").mkdir()
        (root / "busy" / "notes.txt").write_text("mine")
        targets = [checkpoint, checkpoint / "inner", checkpoint.parent, root / "a_file", root / "a_file" / "out",
                   root / "busy"]
        for out in targets[:3] + targets[4:] if quick else targets:
            counts["output_attacks"] += 1
            code, err = _quiet(eval_main, checkpoint, "--tasks", 1, "--samples", 1, "--no-progress", "--out", out,
                               *overrides)
            counts["outputs_refused"] += code == 2 and clean_refusal(err)
            counts["outputs_played_before_refusal"] += (checkpoint.parent / "eval").exists() or any(
                root.rglob("trajectories"))
            counts["output_tracebacks"] += "Traceback" in err
        user = dict(files_under(root / "busy"))
        counts["output_attacks"] += 1
        code, err = _quiet(export, checkpoint, "--out", checkpoint.parent / "exports" / "x")
        counts["outputs_refused"] += code == 2 and clean_refusal(err)
        out = root / "export"
        code, _ = _quiet(export, checkpoint, "--out", out)
        (out / "my_notes.txt").write_text("mine")
        (out / "library.md").write_text("edited")
        before = files_under(out)
        counts["output_attacks"] += 1
        code, err = _quiet(export, checkpoint, "--out", out, "--force")
        counts["outputs_refused"] += code == 2 and clean_refusal(err)
        after = files_under(out)
        counts["user_files_lost"] += sum(before[k] != after.get(k) for k in ("my_notes.txt", "library.md"))
        counts["user_files_lost"] += files_under(root / "busy") != user

        for how in DAMAGED_WEIGHTS:
            copy = damaged_copy(checkpoint, root / how.replace(" ", "_") / "global_step_1", how)
            counts["damaged_weights"] += 1
            code, err = _quiet(eval_main, copy, "--tasks", 1, "--samples", 1, "--no-progress", "--out",
                               root / f"eval_{how.replace(' ', '_')}", *overrides)
            counts["damaged_weights_one_line"] += code == 2 and clean_refusal(err) and str(copy / "policy") in err
            counts["output_tracebacks"] += "Traceback" in err
    return counts


ATTACKS = [
    Attack(attack_checkpoint_code,
           lambda r: r["checkpoint_code_refused"] == r["checkpoint_code_attacks"] > 0 and r["checkpoint_code_ran"] == 0
           and r["checkpoint_code_tracebacks"] == 0,
           {"code_ran": ("checkpoint_code_ran",), "tracebacks": ("checkpoint_code_tracebacks",)}),
    Attack(attack_received_records,
           lambda r: r["records_refused_or_left_out"] == r["record_attacks"] > 0 and r["secrets_sent_or_written"] == 0
           and r["records_mistaken"] == 0 and r["record_hangs"] == 0 and r["record_tracebacks"] == 0,
           {"secrets_sent_or_written": ("secrets_sent_or_written",), "runs_lost_or_mistaken": ("records_mistaken",),
            "hangs": ("record_hangs",), "tracebacks": ("record_tracebacks",)}),
    Attack(attack_outputs,
           lambda r: r["outputs_refused"] == r["output_attacks"] > 0 and r["outputs_played_before_refusal"] == 0
           and r["user_files_lost"] == 0 and r["damaged_weights_one_line"] == r["damaged_weights"] == 3
           and r["output_tracebacks"] == 0,
           {"runs_lost_or_mistaken": ("user_files_lost", "outputs_played_before_refusal"),
            "tracebacks": ("output_tracebacks",)}),
]

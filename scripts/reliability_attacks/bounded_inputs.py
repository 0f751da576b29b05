"""Attacks for scripts/reliability_report.py (issue 35, items 8, 9 and 11): what Python's json and the engines'
image paths cannot take politely.

* attack_huge_numbers: a library file holding a 5,000-digit integer, read by the library viewer, the library
  diff, the trajectory page (``--library``), export and a resume; a rollout dump and a metrics.jsonl with a line
  nested 100,000 levels deep. ``bounded_read_tracebacks`` counts readers that ended in a traceback instead of one
  line (or a skipped line).
* attack_diff_next_id: ``slea-rl-library diff`` of two libraries of one run, the second with ``next_id`` = 10^18,
  in a subprocess with a time limit: ``diff_hangs`` counts the limit hit.
* attack_images: every malformed and oversized kind of image observation (agent_system/testing/faulty_env.py
  IMAGES) through an environment manager, where every engine takes its images, and through the prompt-only
  engine's request encoder. ``images_reaching_engines`` counts malformed images that came out of the manager as
  observations, ``image_tracebacks`` escapes; ``largest_request_bytes`` is the data URL of the largest image taken.

all_caught condition: see ATTACKS; before the fixes: ValueError (4,300-digit limit) and RecursionError
tracebacks in every reader, the diff running forever, malformed images crashing both engines and 256 MB
requests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

from reliability_attacks import REPO, Attack, clean_refusal

HUGE = "9" * 5_000
DEEP = "[" * 100_000 + "]" * 100_000


def _library_checkpoint(root: Path):
    """A prompt-only checkpoint (``global_step_1/library``) of a library with entries, and its system."""
    from recipe.forge.testing.received import small_system
    from recipe.forge.runs.checkpoint import save_checkpoint

    system = small_system()
    return save_checkpoint(root / "run", 1, rng={}, experience=system), system


def _command(main, *argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return main(list(map(str, argv))), err.getvalue()
        except Exception as exc:  # noqa: BLE001 - the finding
            return -1, f"Traceback: {type(exc).__name__}: {exc}"


def attack_huge_numbers(quick: bool) -> dict:
    from recipe.forge.commands.export import main as export
    from recipe.forge.commands.library_viewer import main as library_main
    from recipe.forge.commands.trajectory_viewer import main as trajectories_main
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.runs.checkpoint import load_checkpoint
    from recipe.forge.runs.tracking import read_metrics

    counts = {"bounded_read_attacks": 0, "bounded_reads_caught": 0, "bounded_read_tracebacks": 0}

    def tally(caught: bool, traceback: bool) -> None:
        counts["bounded_read_attacks"] += 1
        counts["bounded_reads_caught"] += caught and not traceback
        counts["bounded_read_tracebacks"] += traceback

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint, system = _library_checkpoint(root)
        library = checkpoint / "library"
        file = library / "experience_library.json"
        file.write_text(re.sub(r'"iteration": ?\d+', f'"iteration": {HUGE}', file.read_text(), count=1))
        (root / "dump").mkdir()
        (root / "dump" / "1.jsonl").write_text("")
        commands = [(library_main, [library]), (library_main, ["diff", library, library]),
                    (trajectories_main, [root / "dump", "--out", root / "page", "--library", library]),
                    (export, [checkpoint, "--out", root / "export"])]
        for main, argv in commands:
            code, err = _command(main, *argv)
            tally(code == 2 and "5,000 digits" in err and clean_refusal(err), "Traceback" in err)
        try:
            load_checkpoint(checkpoint, rng={}, experience=ExperienceSystem.from_config(system.cfg))
            tally(False, False)
        except Exception as exc:  # noqa: BLE001
            tally(type(exc).__name__ == "CheckpointError" and "5,000 digits" in str(exc),
                  type(exc).__name__ != "CheckpointError")

        (root / "dump" / "1.jsonl").write_text(DEEP + "\n")
        code, err = _command(trajectories_main, root / "dump", "--out", root / "page2")
        tally(code == 0 and "nested too deeply" in err, "Traceback" in err)
        metrics = root / "metrics.jsonl"
        metrics.write_text(json.dumps({"iteration": 1}) + "\n" + DEEP + "\n" + f'{{"iteration": {HUGE}}}\n')
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tally([r["iteration"] for r in read_metrics(metrics)] == [1], False)
        except Exception:  # noqa: BLE001
            tally(False, True)
    return counts


DIFF = textwrap.dedent("""
    import sys
    from recipe.forge.testing.received import small_system
    from recipe.forge.commands.library_viewer import main
    a = small_system()
    a.save(sys.argv[1])
    a.library.next_id = 10**18
    a.save(sys.argv[2])
    sys.exit(main(["diff", sys.argv[1], sys.argv[2]]))
""")


def attack_diff_next_id(quick: bool) -> dict:
    counts = {"diff_attacks": 1, "diff_answered": 0, "diff_hangs": 0}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([sys.executable, "-c", DIFF, f"{tmp}/a", f"{tmp}/b"], cwd=REPO, capture_output=True,
                                  text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
            counts["diff_answered"] += proc.returncode == 0 and "added then dropped" in proc.stdout
        except subprocess.TimeoutExpired:
            counts["diff_hangs"] += 1
    return counts


def attack_images(quick: bool) -> dict:
    from agent_system.environments.images import MAX_IMAGE_PIXELS
    from agent_system.testing.configs import env_config
    from agent_system.testing.faulty_env import IMAGES, FaultyEnvironmentManager
    from recipe.forge.engines.api.chat_content import png_data_url

    malformed = sorted(set(IMAGES) - {"good"})
    counts = {"image_attacks": 0, "images_refused": 0, "images_reaching_engines": 0, "image_tracebacks": 0,
              "largest_request_bytes": 0}
    cfg = env_config(n=len(malformed), resources_per_worker={"num_workers": 1, "step_timeout_s": 30.0})
    manager = FaultyEnvironmentManager(cfg, num_tasks=1, split="train", env_name="testing/faulty")
    try:
        manager.reset([2])
        obs, _, dones, infos = manager.step([f"<action>image:{kind}</action>" for kind in malformed])
        for i in range(len(malformed)):
            counts["image_attacks"] += 1
            counts["images_refused"] += bool(dones[i]) and "image observation" in str(infos[i].get("failure_reason"))
            counts["images_reaching_engines"] += obs.image[i] is not None
    except Exception:  # noqa: BLE001
        counts["image_tracebacks"] += 1
    finally:
        manager.close()
    for kind in malformed:
        counts["image_attacks"] += 1
        try:
            png_data_url(IMAGES[kind]())
        except ValueError:
            counts["images_refused"] += 1
        except Exception:  # noqa: BLE001
            counts["image_tracebacks"] += 1
    import numpy as np

    side = int(MAX_IMAGE_PIXELS ** 0.5)
    noise = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)  # PNG cannot shrink it
    counts["largest_request_bytes"] = len(png_data_url(noise))
    return counts


ATTACKS = [
    Attack(attack_huge_numbers,
           lambda r: r["bounded_reads_caught"] == r["bounded_read_attacks"] > 0 and r["bounded_read_tracebacks"] == 0,
           {"tracebacks": ("bounded_read_tracebacks",)}),
    Attack(attack_diff_next_id, lambda r: r["diff_answered"] == r["diff_attacks"] and r["diff_hangs"] == 0,
           {"hangs": ("diff_hangs",)}),
    Attack(attack_images,
           lambda r: r["images_refused"] == r["image_attacks"] > 0 and r["images_reaching_engines"] == 0
           and r["image_tracebacks"] == 0 and r["largest_request_bytes"] < 20_000_000,
           {"tracebacks": ("image_tracebacks",)}),
]

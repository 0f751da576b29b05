"""docs/adding_an_environment.md, followed to the letter on a copy of the repository.

The page's "New file `PATH`:" blocks are written and its "In `PATH`, after the line starting with `ANCHOR`:"
blocks inserted, nothing else. Then, in that copy: the typed section takes `env.guess_number.level=2` from the
command line and reaches the environment, a bad level fails at start-up naming the key, expert episodes all
succeed on both splits with held-out validation tasks, docs/configuration.md passes the docs test, and the
page's own commands run (the benchmark for real; training commands through every start-up check).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding_an_environment.md"
NEW_FILE = re.compile(r"^New file `([^`]+)`:\n\n```\w*\n(.*?)^```", re.M | re.S)
INSERT = re.compile(r"^In `([^`]+)`, after the line starting with (?:``(.+?)``|`(.+?)`):\n\n```\w*\n(.*?)^```",
                    re.M | re.S)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)

CHECKS = r'''
import io, json, runpy, shlex, sys
from contextlib import redirect_stdout
from hydra import compose, initialize_config_dir
from agent_system.config_checks import ConfigError
from agent_system.environments import make_envs
from agent_system.multi_turn_rollout.protocols import SamplingParams
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.testing.policies import ExpertGenerator
from recipe.forge.main_forge import validate

commands, repo = json.loads(sys.argv[1]), sys.argv[2]

def config(overrides):
    with initialize_config_dir(config_dir=f"{repo}/recipe/forge/config", version_base=None):
        return compose("forge_trainer", overrides=overrides)

cfg = config(["env.env_name=guess_number", "env.guess_number.level=2", "data.train_batch_size=4",
              "data.val_batch_size=4", "env.rollout.n=2"])
assert validate(cfg).env.guess_number.level == 2
try:
    validate(config(["env.env_name=guess_number", "env.guess_number.level=0"]))
    raise AssertionError("level 0 was accepted")
except ConfigError as exc:
    assert "env.guess_number.level=0" in str(exc), exc
train, val = make_envs(cfg)
for envs in (train, val):
    obs, _ = envs.reset()
    assert all(o == "The number is between 1 and 16." for o in obs.anchor), obs.anchor
    batch = TrajectoryCollector().collect(envs, ExpertGenerator(envs), SamplingParams())
    assert batch.metrics["success_rate"] == 1.0, batch.metrics
    assert batch.metrics["episode_length/max"] <= 5  # binary search over 16 numbers
    envs.close()
assert min(val.task_seeds) >= cfg.env.val_seed_offset > max(train.task_seeds)  # validation tasks are held out

sys.path.insert(0, f"{repo}/tests/foundation")
import test_docs
test_docs.test_every_own_key_is_documented_with_its_default()
test_docs.test_no_documented_key_is_stale()

for command in commands:
    words = shlex.split(command)
    if words[0] == "slea-rl":
        validate(config(words[1:]))
    elif words[:2] == ["python", "scripts/bench_envs.py"]:
        sys.argv = words[1:]
        out = io.StringIO()
        with redirect_stdout(out):
            runpy.run_path(words[1], run_name="__main__")
        summary = json.loads(out.getvalue().strip().splitlines()[-1])
        assert summary["success_rate"] == 1.0 and summary["groups_identical_at_reset"], summary
    else:
        raise AssertionError(f"no check for the command {command!r}")
print("ADDED OK", len(commands))
'''


def follow_the_page(repo: Path) -> None:
    text = PAGE.read_text()
    new_files = NEW_FILE.findall(text)
    inserts = INSERT.findall(text)
    assert len(new_files) >= 5 and len(inserts) >= 5, "the page lost its file blocks"
    for path, body in new_files:
        assert not (repo / path).exists(), f"{path} already exists"
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(body)
    for path, anchor_a, anchor_b, body in inserts:
        anchor = anchor_a or anchor_b
        lines = (repo / path).read_text().splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.startswith(anchor)]
        assert len(hits) == 1, f"{path}: the anchor {anchor!r} matches {len(hits)} lines"
        lines[hits[0] + 1:hits[0] + 1] = [body]
        (repo / path).write_text("".join(lines))


def page_commands() -> list[str]:
    return [line.strip() for language, body in FENCE.findall(PAGE.read_text()) if language == "bash"
            for line in body.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the repository's files")
def test_the_documented_environment_works_end_to_end(tmp_path):
    repo = tmp_path / "repo"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    follow_the_page(repo)
    commands = page_commands()
    assert any(c.startswith("python scripts/bench_envs.py") for c in commands)
    proc = subprocess.run([sys.executable, "-c", CHECKS, json.dumps(commands), str(repo)], cwd=repo,
                          env={**_clean_env(), "PYTHONPATH": str(repo)}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and f"ADDED OK {len(commands)}" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

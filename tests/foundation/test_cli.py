"""The command line a user meets first: ``--help`` shows our keys and commands, short and without noise."""

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_our_keys_and_commands_in_under_80_lines(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    output = proc.stdout + proc.stderr
    assert len(output.splitlines()) < 80
    for needle in ("trainer.engine", "trainer.val_only", "algorithm.forge.", "env.env_name", "--cfg job",
                   "+experiment=main_job", "slea-rl-library", "slea-rl-trajectories", "slea-rl eval", "slea-rl export",
                   "docs/configuration.md", "trainer.rollout_data_dir"):
        assert needle in output, needle
    assert "WARNING" not in output and "not available" not in output
    assert "ppo_mini_batch_size" not in output, "verl's full config belongs behind --cfg job"
    assert not list(tmp_path.iterdir()), "--help must not create a run folder"


def test_help_names_the_console_scripts_the_package_installs():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"slea-rl", "slea-rl-library", "slea-rl-trajectories"}
    readme = (ROOT / "README.md").read_text()
    for name in scripts:
        assert f"`{name}`" in readme, f"console script {name} is not documented in the README"


def test_slea_rl_eval_is_a_command_of_slea_rl(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", "eval", str(tmp_path / "missing")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"slea-rl eval: {tmp_path / 'missing'}: no such folder (give a checkpoint "
                                                "global_step_<k>/ or a Hugging Face model folder)"]
    assert not list(tmp_path.iterdir())


def test_each_commands_help_opens_with_its_whole_first_paragraph():
    """--help's description is the command's first paragraph, whole (it was the first line of a wrapped sentence)."""
    for command, sentence_end in ((["-m", "recipe.forge.main_forge", "eval"], "the same at any evaluation batch size."),
                                  (["-m", "recipe.forge.commands.trajectory_viewer"], "shown on its first row.")):
        proc = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert sentence_end in " ".join(proc.stdout.split()), proc.stdout

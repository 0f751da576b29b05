"""scripts/check_examples.py over every example script, and its verdict on broken ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_examples.py"


@pytest.fixture(scope="module")
def check_examples(load_script):
    return load_script("check_examples.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "-q", *args], cwd=REPO, capture_output=True, text=True, timeout=500)


def test_every_example_script_composes_and_validates():
    proc = run()
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert last.startswith("check_examples OK:") and "0 failed" in last
    n_scripts = len(list((REPO / "examples").rglob("*.sh")))
    assert f"{n_scripts} scripts" in last


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.forge.step_advantge_w=1.0", "step_advantge_w"),  # typo in a key
        ("env.max_steps=0", "env.max_steps"),  # bad value in our schema
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size=4", "log_prob_micro_batch_size"),  # verl's own check
        ("algorithm.adv_estimator=forje", "adv_estimator"),
    ],
)
def test_a_broken_script_fails_with_the_key_named(check_examples, capsys, tmp_path, override, message):
    good = (REPO / "examples" / "forge" / "run_alfworld.sh").read_text()
    # the script sources ../common/alfworld_base.sh, which sources verl_defaults.sh: keep that layout beside the
    # broken copy
    (tmp_path / "examples" / "forge").mkdir(parents=True)
    shutil.copytree(REPO / "examples" / "common", tmp_path / "examples" / "common")
    broken = tmp_path / "examples" / "forge" / "broken.sh"
    broken.write_text(good.replace('    "$@"', f"    {override} \\\n    \"$@\""))
    assert check_examples.main(["-q", str(broken)]) == 1
    out = capsys.readouterr().out
    assert message in out
    assert out.strip().splitlines()[-1].startswith("check_examples FAILED: 1 scripts, 1 commands checked, 1 failed")


def test_variables_and_continuations_are_expanded(check_examples, tmp_path):
    script = tmp_path / "vars.sh"
    script.write_text(
        "#!/usr/bin/env bash\nSTEPS=${STEPS:-7}\nexport GAMMA=0.9\n"
        "python3 -m recipe.forge.main_forge \\\n    env.max_steps=$STEPS \\\n"
        "    algorithm.gamma=${GAMMA} \\\n    # a comment line inside the command\n    trainer.engine=local \"$@\"\n"
    )
    (command,) = check_examples.extract_commands(script)
    assert command.overrides == ["env.max_steps=7", "algorithm.gamma=0.9", "trainer.engine=local"]


def test_variables_the_caller_sets_replace_the_defaults_and_nothing_else_is_read(check_examples, tmp_path,
                                                                                 monkeypatch):
    script = tmp_path / "vars.sh"
    script.write_text("#!/usr/bin/env bash\nGPUS=${GPUS:-8}\nFIXED=3\n"
                      "python3 -m recipe.forge.main_forge trainer.n_gpus_per_node=$GPUS env.max_steps=$FIXED\n")
    monkeypatch.setenv("GPUS", "4")  # the process environment is not the caller's command line: ignored
    (default,) = check_examples.extract_commands(script)
    (given,) = check_examples.extract_commands(script, {"GPUS": "1", "FIXED": "9"})
    assert default.overrides == ["trainer.n_gpus_per_node=8", "env.max_steps=3"]
    assert given.overrides == ["trainer.n_gpus_per_node=1", "env.max_steps=3"]  # an assignment wins, as in bash


def test_arrays_and_sourced_files_are_expanded(check_examples, tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "base.sh").write_text(
        "# shared settings\nSTEPS=${STEPS:-7}\nNAME='two words'\nBASE=(\n    env.max_steps=$STEPS\n\n"
        "    # a comment inside the array\n    trainer.experiment_name=\"$NAME\"\n)\nONE_LINE=(algorithm.gamma=0.9 env.seed=3)\n"
    )
    script = tmp_path / "run" / "run.sh"
    script.parent.mkdir()
    script.write_text(
        '#!/usr/bin/env bash\nsource "$(dirname "${BASH_SOURCE[0]}")/../common/base.sh"\n'
        'python3 -m recipe.forge.main_forge \\\n    "${BASE[@]}" \\\n    trainer.engine=local \\\n    "${ONE_LINE[@]}" \\\n    "$@"\n'
    )
    (command,) = check_examples.extract_commands(script)
    assert command.overrides == ["env.max_steps=7", "trainer.experiment_name=two words", "trainer.engine=local", "algorithm.gamma=0.9", "env.seed=3"]


@pytest.mark.parametrize(
    "body, message",
    [
        ('source "$(dirname "$0")/missing.sh"\n', "missing.sh"),
        ('python3 -m recipe.forge.main_forge "${NEVER_SET[@]}"\n', "NEVER_SET"),
        ("ARR=(\n    a=1\n", "not closed"),
    ],
)
def test_bad_sourcing_and_arrays_are_errors_naming_the_problem(check_examples, tmp_path, body, message):
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\n" + body)
    with pytest.raises(ValueError, match=message):
        check_examples.extract_commands(script)


def test_the_static_parse_agrees_with_bash_on_every_example(check_examples, tmp_path):
    """Run each example script under bash with ``python3`` replaced by a stub that prints its arguments: the
    overrides bash passes must be the ones check_examples composed (so arrays, sourced files and defaults are
    read the way the shell reads them). Like check_examples, the caller's environment is left out (HOME is
    empty, as check_examples expands an unknown variable)."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    stub = stub_dir / "python3"
    stub.write_text('#!/usr/bin/env bash\nshift 2\nprintf "%s\\n" "$@"\n')  # drop "-m recipe.forge.main_forge"
    stub.chmod(0o755)
    checked = 0
    for script in sorted((REPO / "examples").rglob("*.sh")):
        commands = check_examples.extract_commands(script)
        if not commands:
            continue
        (command,) = commands
        proc = subprocess.run(["bash", str(script), "extra.key=1"], env={"PATH": f"{stub_dir}:/usr/bin:/bin", "HOME": ""}, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{script}: {proc.stderr}"
        assert proc.stdout.splitlines() == command.overrides + ["extra.key=1"], script
        checked += 1
    assert checked >= 14  # 6 forge, 7 baselines, 1 prompt-only


def test_here_documents_are_not_read_as_shell(check_examples, tmp_path):
    script = tmp_path / "heredoc.sh"
    script.write_text(
        "#!/usr/bin/env bash\npython3 - <<'PY'\nsource = 1\nSTEPS = 3\nprint('python3 -m recipe.forge.main_forge x=1')\nPY\n"
        "STEPS=${STEPS:-5}\npython3 -m recipe.forge.main_forge env.max_steps=$STEPS\n"
    )
    (command,) = check_examples.extract_commands(script)
    assert command.overrides == ["env.max_steps=5"]


def test_run_scripts_start_the_projects_interpreter_without_an_activated_environment(tmp_path):
    """With only the system's folders on PATH (no activated venv, whose python3 would have SLEA-RL), a run script
    finds the repository's own .venv (examples/common/python.sh) and its command runs: here Hydra's --cfg, which
    composes the script's config and prints it without training."""
    venv_python = REPO / ".venv" / "bin" / "python"
    if Path(sys.executable).resolve().parent != venv_python.resolve().parent:
        pytest.skip("the suite runs outside the repository's .venv")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "examples/forge/run_numberline_cpu.sh"), "--cfg", "job", "--package",
                           "trainer"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "engine: verl" in proc.stdout and "experiment_name: forge_numberline_verl_cpu" in proc.stdout
    proc = subprocess.run(["bash", str(REPO / "examples/forge/run_numberline_cpu.sh")], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={**env, "PYTHON": str(tmp_path / "missing-python")})
    assert proc.returncode != 0 and "missing-python" in proc.stderr  # $PYTHON, when set, is the one started

"""The documented install line works: run with the GPU extra left out, it gives a fresh virtual environment that
imports our plug-in and registers forge in verl.

To stay cheap (about a minute), the fresh environment borrows the already-installed third-party packages of the
running one through a path file (never our own project, its path file or its entry points), so pip finds the
dependencies satisfied instead of downloading several GB. What is tested for real: the documented command
itself, the compat editable install of a copy of this repository, its extras' requirements, the console
scripts, the model packages, and that `import verl` in that environment loads our plug-in from the copy.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LINE = re.compile(r"^bash scripts/install\.sh (\S+)$", re.M)


def documented_gpu_install() -> str:
    lines = INSTALL_LINE.findall((ROOT / "README.md").read_text())
    gpu = [extras for extras in lines if "gpu" in extras.split(",")]
    assert len(gpu) == 1, f"the README must show exactly one GPU install line, found {gpu}"
    return gpu[0]


def test_every_gpu_install_instruction_is_the_documented_one():
    extras = documented_gpu_install()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "scripts/gpu_smoke.sh"]:
        text = path.read_text()
        assert "pip install -e" not in text, f"{path.relative_to(ROOT)} shows another install command"
        for found in INSTALL_LINE.findall(text) + re.findall(r"bash scripts/install\.sh (\S+)", text):
            if "gpu" in found.split(","):
                assert found == extras, f"{path.relative_to(ROOT)}: install extras {found} != README's {extras}"


def _copy_repository(destination: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def _third_party_view(destination: Path) -> None:
    """Links to every installed distribution of this interpreter except this project and path files."""
    destination.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name
        if name.endswith(".pth") or name.startswith(("__editable__", "slea_rl")) or name == "__pycache__":
            continue
        (destination / name).symlink_to(entry)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the repository's files")
def test_documented_install_without_the_gpu_extra_registers_forge_in_a_fresh_venv(tmp_path):
    extras = ",".join(e for e in documented_gpu_install().split(",") if e != "gpu")
    repo, view, venv = tmp_path / "repo", tmp_path / "site", tmp_path / "venv"
    _copy_repository(repo)
    _third_party_view(view)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "third_party.pth").write_text(f"{view}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"  # `python` is the fresh venv's, as when activated

    proc = subprocess.run(["bash", "scripts/install.sh", extras], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SLEA-RL installed from {repo}: forge registered" in proc.stdout

    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import recipe, recipe.forge, verl\n"
         "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
         "print(recipe.__file__, recipe.forge.__file__, sorted({'forge', 'gigpo'} & set(ADV_ESTIMATOR_REGISTRY)))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    recipe_init, forge_init, registered = check.stdout.strip().split(" ", 2)
    assert Path(recipe_init) == repo / "recipe" / "__init__.py"  # ours, not TransferQueue's namespace folder
    assert Path(forge_init) == repo / "recipe" / "forge" / "__init__.py"
    assert registered == "['forge', 'gigpo']"
    for script in ("slea-rl", "slea-rl-library", "slea-rl-trajectories"):
        assert (venv / "bin" / script).exists(), f"console script {script} was not installed"

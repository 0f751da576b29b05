"""Every command in docs/coming_from_verl_agent.md, docs/outputs.md and docs/environments.md works as written, and
so does every run script command of docs/gpu_cluster.md (its other commands, `ray start` and the install, need a
cluster or are tested in test_install.py).

Commands are the lines of the pages' ```bash blocks. Each kind is exercised the cheapest honest way:
training commands (``slea-rl ...``) compose their config and pass every start-up check of their engine
(the same checks a real start makes before any model is loaded; running them is the job of the engine tests,
e.g. tests/local_engine/test_evaluate.py for ``trainer.val_only``); run scripts with extra overrides (and
``VAR=value`` settings before them, which the script's ``${VAR:-default}`` take) go through
scripts/check_examples.py with those overrides appended; the viewer,
the export, the plotting script, the tiny VLM builder and TensorBoard run for real on the run folder of a main job
run here (a tiny model in SmolLM2's place), and the page's listings of checkpoints and rollout dumps are held to
what that run wrote.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("docs/coming_from_verl_agent.md", "docs/outputs.md", "docs/environments.md")
RUN = "runs/slea_rl/forge_numberline"
LAST = 16  # the main job's iterations: its last checkpoint
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
OUR_COMMAND = re.compile(r"^(slea-rl|python -m recipe\.|python scripts/|bash (examples|scripts)/)", re.M)


def fenced_blocks(page: str) -> list[tuple[str, str]]:
    return FENCE.findall((ROOT / page).read_text())


def commands(page: str) -> list[str]:
    lines = []
    for language, body in fenced_blocks(page):
        if language == "bash":
            lines += [line.split(" #")[0].strip() for line in body.replace("\\\n", " ").splitlines()
                      if line.strip() and not line.lstrip().startswith("#")]
    return lines


ALL = [(page, command) for page in PAGES for command in commands(page)]


def test_the_pages_have_commands_and_none_hides_outside_a_bash_block():
    for page in PAGES:
        assert commands(page), page
        for language, body in fenced_blocks(page):
            if language != "bash":
                assert not OUR_COMMAND.search(body), f"{page}: a command outside a ```bash block:\n{body}"


@pytest.fixture(scope="module")
def check_examples(load_script):
    return load_script("check_examples.py")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """The main job's run folder, written by the main job itself (``+experiment=main_job`` with the rollout dumps
    the page's command adds), a tiny Llama taught the answer format in place of SmolLM2 so that its 16 iterations
    take seconds: checkpoints, library copy, rollout dumps, metrics and TensorBoard under the names a user's run
    gives them."""
    from hydra import compose, initialize_config_dir

    from recipe.forge.hf.tiny import save_tiny_model_dir
    from recipe.forge.main_forge import run

    base = tmp_path_factory.mktemp("cwd")
    model = save_tiny_model_dir(tmp_path_factory.mktemp("tiny_answering"))
    folder = base / RUN
    with initialize_config_dir(config_dir=str(ROOT / "recipe/forge/config"), version_base=None):
        cfg = compose("forge_trainer", overrides=[
            "+experiment=main_job", f"actor_rollout_ref.model.path={model}", f"trainer.default_local_dir={folder}",
            f"trainer.rollout_data_dir={folder}/rollouts", "trainer.local.progress=false"])
    run(cfg)
    library = folder / "global_step_16" / "library" / "experience_library.json"
    zones = json.loads(library.read_text())["payload"]["library"]["entries"]
    assert {entry["zone"] for entry in zones} == {"golden", "warning"}, "the viewer must have both zones to show"
    return base


def check_training_command(arguments: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from recipe.forge.main_forge import validate

    with initialize_config_dir(config_dir=str(ROOT / "recipe/forge/config"), version_base=None):
        cfg = compose("forge_trainer", overrides=arguments)
    run = validate(cfg)
    assert run.trainer.val_only == bool(cfg.trainer.get("val_only"))


@pytest.mark.parametrize("page, command", ALL, ids=[f"{Path(p).stem}:{c[:60]}" for p, c in ALL])
def test_documented_command_works(page, command, run_folder, check_examples, load_script, monkeypatch):
    words = shlex.split(command)
    settings = {}  # VAR=value before a run script: the script's ${VAR:-default} take them
    while re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        name, value = words.pop(0).split("=", 1)
        settings[name] = value
    if words[:2] == ["slea-rl", "export"]:
        from recipe.forge.commands.export import main as export

        monkeypatch.chdir(run_folder)
        assert export(words[2:]) == 0
        out = run_folder / words[words.index("--out") + 1]
        manifest = json.loads((out / "manifest.json").read_text())
        assert (manifest["engine"], manifest["iteration"]) == ("local", LAST) and manifest["library"]["entries"] > 0
        assert (out / "library.md").stat().st_size > 0 and (out / "config.json").is_file()
    elif words[:2] == ["slea-rl", "eval"]:  # played for real by tests/local_engine/test_eval_command.py
        from recipe.forge.commands.eval.sources import identify
        from recipe.forge.commands.eval.evaluate import load_config, parser

        monkeypatch.chdir(run_folder)
        args, overrides = parser().parse_known_args(words[2:])
        source = identify(args.checkpoint)
        assert source.iteration == LAST and source.library_dir is not None
        assert load_config(overrides + ["trainer.api.base_url=http://127.0.0.1:1/v1"], source).data.val_batch_size > 0
    elif words[0] == "slea-rl":
        monkeypatch.chdir(run_folder)  # the run folder the commands name (runs/...) lives here
        check_training_command(words[1:])
    elif words[:2] == ["bash", words[1]] and words[1].startswith("examples/"):
        found = check_examples.extract_commands(ROOT / words[1], settings)
        assert found, f"{words[1]} has no training command"
        for script_command in found:
            script_command.overrides += words[2:]
            check_examples.check_command(script_command)
    elif words[0] == "slea-rl-library":
        from recipe.forge.commands.library_viewer import main as viewer

        out = run_folder / "viewer_exports"
        out.mkdir(exist_ok=True)
        argv = [str(run_folder / w) if w.startswith("runs/") else (str(out / w) if w.endswith((".md", ".html"))
                                                                     else w) for w in words[1:]]
        assert viewer(argv) == 0
        for word in words[1:]:
            if word.endswith((".md", ".html")):
                assert (out / word).stat().st_size > 0
    elif words[0] == "slea-rl-trajectories":
        from recipe.forge.commands.trajectory_viewer import main as trajectories

        monkeypatch.chdir(run_folder)
        assert trajectories(words[1:]) == 0
        out = run_folder / words[words.index("--out") + 1]
        assert (out / "trajectories.html").stat().st_size > 0 and (out / "trajectories.md").stat().st_size > 0
        if "--library" in words:
            assert "library.html#entry-" in (out / "trajectories.html").read_text(encoding="utf-8")
    elif words[:2] == ["python", "scripts/make_tiny_vlm.py"]:
        monkeypatch.chdir(run_folder)
        load_script("make_tiny_vlm.py").main(words[2:])
        config = json.loads((run_folder / words[words.index("--out") + 1] / "config.json").read_text())
        assert "vision_config" in config
    elif words[:2] == ["python", "scripts/plot_training.py"]:
        argv = [w.replace("runs/", f"{run_folder}/runs/") for w in words[2:]]
        argv = [str(run_folder / w) if w.endswith(".png") else w for w in argv]
        proc = subprocess.run([sys.executable, str(ROOT / "scripts/plot_training.py"), *argv], cwd=run_folder,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert any(p.suffix == ".png" and p.stat().st_size > 0 for p in run_folder.iterdir())
    elif words[:2] == ["tensorboard", "--logdir"]:
        tensorboard = Path(sys.executable).with_name("tensorboard")
        proc = subprocess.run([str(tensorboard), "--inspect", "--logdir", str(run_folder / words[2])],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "success_rate" in proc.stdout, proc.stdout + proc.stderr
    else:
        pytest.fail(f"{page}: no check for the command {command!r}; add one here")


def listing(page: str, first_line: str) -> str:
    """The plain code block of ``page`` that starts with ``first_line``."""
    [body] = [body for language, body in fenced_blocks(page) if not language and body.startswith(first_line)]
    return body


def test_the_outputs_pages_listings_name_what_the_main_job_wrote(run_folder):
    """The checkpoints docs/outputs.md names for the main job's folder (listings and commands) are the ones it
    writes, its last among them; the rollout listing names every dump file of the run; the library copy is the
    last iteration's; the export listing names what the export writes."""
    folder = run_folder / RUN
    written = {int(p.name.removeprefix("global_step_")) for p in folder.glob("global_step_*")}
    named = {int(k) for _, body in fenced_blocks("docs/outputs.md") for line in body.splitlines()
             if "forge_alfworld" not in line for k in re.findall(r"global_step_(\d+)", line)}
    assert LAST in named and named <= written, (named, written)

    dumps = {p.relative_to(folder / "rollouts").as_posix() for p in (folder / "rollouts").rglob("*.jsonl")}
    shown = listing("docs/outputs.md", f"{RUN}/rollouts/")
    assert f"1.jsonl ... {LAST}.jsonl" in shown
    passes = set(re.findall(r"\bval(?:_no_library)?/\d+\.jsonl", shown))
    assert dumps == {f"{k}.jsonl" for k in range(1, LAST + 1)} | passes, sorted(dumps)

    copy = json.loads((folder / "forge_library" / "experience_library.json").read_text())["payload"]
    last = json.loads((folder / f"global_step_{LAST}" / "library" / "experience_library.json").read_text())["payload"]
    assert copy["library"] == last["library"]

    from recipe.forge.commands.export import main as export

    out = run_folder / "export_of_the_listing"
    assert export([str(folder / f"global_step_{LAST}"), "--out", str(out)]) == 0
    names = [name for line in listing("docs/outputs.md", "exports/").splitlines()[1:]
             for name in re.split(r"\s{2,}", line.lstrip("├└─ "))[0].split(", ")]
    assert len(names) >= 8 and all((out / name).is_file() for name in names), names


def test_the_outputs_pages_python_prompts_the_exported_model_as_the_run_did(run_folder):
    """The page's Python block, run as written in the folder the page's commands run in: it prompts the exported
    main-job model with a validation step's prompt and prints an action."""
    from recipe.forge.commands.export import main as export

    out = run_folder / "exports" / f"forge_numberline_{LAST}"
    if not out.exists():  # the page's export command writes it when it ran first
        assert export([str(run_folder / RUN / f"global_step_{LAST}"), "--out", str(out)]) == 0
    [code] = [body for language, body in fenced_blocks("docs/outputs.md") if language == "python"]
    proc = subprocess.run([sys.executable, "-c", code], cwd=run_folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.fullmatch(r"<action>.*", proc.stdout.strip()), proc.stdout


GPU_PAGE_SCRIPTS = [line for line in commands("docs/gpu_cluster.md") if "bash examples/" in line]


@pytest.mark.parametrize("command", GPU_PAGE_SCRIPTS)
def test_gpu_cluster_page_script_commands_compose_and_validate(command, check_examples):
    words = shlex.split(command)
    start = words.index("bash")
    assert all("=" in w for w in words[:start]), f"only VAR=value may precede the script: {command}"
    found = check_examples.extract_commands(ROOT / words[start + 1], dict(w.split("=", 1) for w in words[:start]))
    assert found, command
    for script_command in found:
        script_command.overrides += words[start + 2:]
        check_examples.check_command(script_command)

"""``slea-rl export`` on embedded-engine checkpoints: the folder loads with plain transformers and generates the
checkpoint policy's greedy tokens (full weights, and a LoRA adapter merged into its base); bad input is one
error line and exit status 2, and nothing is written.

The verl engine's export is tested on the CPU end-to-end run's checkpoint
(tests/verl_engine/test_cpu_end_to_end.py), the prompt-only one by the documented command
(tests/foundation/test_doc_commands.py)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent_system.testing.greedy import greedy_tokens
from recipe.forge.hf.model_loading import PolicyConfig, build_policy
from recipe.forge.hf.tiny import answering_llama, save_tiny_model_dir
from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.commands.export import main as export
from recipe.forge.runs.records import mark_started
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(900)
LORA = dict(lora_rank=4, lora_alpha=8, target_modules=["o_proj", "down_proj"])  # the tiny model's live paths


def train_to_checkpoint(run: Path, policy, compose_cfg, run_overrides, extra=()) -> Path:
    cfg = compose_cfg(run_overrides(run, iterations=1) + ["trainer.save_freq=1", *extra])
    LocalTrainer(validate(cfg), Components(policy=policy)).fit()
    record = run / "hydra" / "2026-01-01_00-00-00" / ".hydra" / "config.yaml"  # what slea-rl's Hydra writes
    record.parent.mkdir(parents=True)
    OmegaConf.save(cfg, record)
    mark_started(record.parent.parent)  # and marks once the run passed its start-up checks
    return run / "global_step_1"


@pytest.fixture(scope="module")
def full_checkpoint(tmp_path_factory, tokenizer):
    from tests.local_engine.conftest import compose, tiny_run_overrides

    run = tmp_path_factory.mktemp("full") / "run"
    policy = build_policy(PolicyConfig(path="tiny", use_reference=True), model=answering_llama(tokenizer),
                          tokenizer=tokenizer)
    checkpoint = train_to_checkpoint(run, policy, compose, tiny_run_overrides)
    cfg = compose(tiny_run_overrides(run, iterations=1) + [  # evaluate it: the manifest carries the figures
        "trainer.val_only=true", "trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}"])
    fresh = build_policy(PolicyConfig(path="tiny", use_reference=True), model=answering_llama(tokenizer, seed=1),
                         tokenizer=tokenizer)
    LocalTrainer(validate(cfg), Components(policy=fresh)).fit()
    return checkpoint


def test_a_full_weight_checkpoint_exports_to_a_plain_model_with_the_policys_greedy_tokens(full_checkpoint, tmp_path,
                                                                                          tokenizer, make_tiny, capsys):
    out = tmp_path / "export"
    assert export([str(full_checkpoint), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    umask = os.umask(0)
    os.umask(umask)  # every file as readable as a new file here is (the weights were 0600, as safetensors writes them)
    assert {p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()} == {0o666 & ~umask}

    # the checkpoint's policy loaded the engine's way (as a resume does), into a differently initialised model
    policy = build_policy(PolicyConfig(path="tiny", use_reference=False), model=make_tiny(seed=3), tokenizer=tokenizer)
    policy.load_weights(full_checkpoint / "policy")
    exported = AutoModelForCausalLM.from_pretrained(out)
    saved = load_file(str(full_checkpoint / "policy" / "model.safetensors"))
    state = exported.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in saved.items())
    expected = greedy_tokens(policy.model, tokenizer)
    assert greedy_tokens(exported, AutoTokenizer.from_pretrained(out)) == expected
    assert len({tuple(t) for t in expected}) >= 1 and any(expected)

    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["engine"], manifest["iteration"], manifest["policy"]["kind"]) == ("local", 1, "full")
    assert manifest["config"]["trainer"]["total_training_steps"] == 1
    assert manifest["config_source"].endswith("hydra/2026-01-01_00-00-00/.hydra/config.yaml")
    assert set(manifest["packages"]) == {"slea-rl", "torch", "transformers", "peft", "verl"}
    assert manifest["packages"]["torch"] == torch.__version__
    val_only = manifest["evaluation"]["val_only"]
    assert [line["iteration"] for line in val_only] == [1] and "val/success_rate" in val_only[0]
    library = json.loads((full_checkpoint / "library" / "experience_library.json").read_text())["payload"]
    assert manifest["library"]["entries"] == len(library["library"]["entries"]) > 0
    assert manifest["library"]["version"] == library["version"]
    view = json.loads((out / "library.json").read_text())
    assert sum(view["sizes"].values()) == manifest["library"]["entries"]
    assert (out / "library.md").read_text().startswith("# Experience library")
    assert (out / "library" / "experience_library.json").read_bytes() == \
        (full_checkpoint / "library" / "experience_library.json").read_bytes()

    # an earlier export is replaced with --force, and only then
    assert export([str(full_checkpoint), "--out", str(out)]) == 2
    assert "not empty; --force" in capsys.readouterr().err
    assert export([str(full_checkpoint), "--out", str(out), "--force"]) == 0
    assert AutoModelForCausalLM.from_pretrained(out) is not None
    # ... and only while it holds what the export wrote: a file added or changed there is the user's
    capsys.readouterr()
    for change, says in ((lambda: (out / "my_notes.txt").write_text("mine"), "my_notes.txt was added"),
                         (lambda: (out / "library.md").write_text("edited"), "library.md was changed")):
        change()
        assert export([str(full_checkpoint), "--out", str(out), "--force"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    assert (out / "my_notes.txt").read_text() == "mine" and (out / "library.md").read_text() == "edited"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export")]  # no staging folder left


def test_a_lora_checkpoint_exports_with_the_adapter_merged_into_its_base(tmp_path, tokenizer, compose_cfg,
                                                                         run_overrides):
    base = save_tiny_model_dir(tmp_path / "base")
    lora_keys = [f"actor_rollout_ref.model.path={base}", "actor_rollout_ref.model.lora_rank=4",
                 "actor_rollout_ref.model.lora_alpha=8", "actor_rollout_ref.model.target_modules=[o_proj,down_proj]"]

    def lora_policy():
        return build_policy(PolicyConfig(path=base, use_reference=True, **LORA))

    checkpoint = train_to_checkpoint(tmp_path / "run", lora_policy(), compose_cfg, run_overrides, lora_keys)
    assert (checkpoint / "policy" / "adapter_config.json").is_file()
    out = tmp_path / "export"
    assert export([str(checkpoint), "--out", str(out)]) == 0

    policy = lora_policy()  # the engine's way: the base with fresh adapters, then the checkpoint's weights
    policy.load_weights(checkpoint / "policy")
    exported = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in name for name in exported.state_dict())
    assert greedy_tokens(exported, AutoTokenizer.from_pretrained(out)) == greedy_tokens(policy.model, tokenizer)

    # W + (alpha / r) B A for every adapted module, from the adapter file; every other weight is the base's
    adapter = load_file(str(checkpoint / "policy" / "adapter_model.safetensors"))
    base_state = AutoModelForCausalLM.from_pretrained(base).state_dict()
    state = exported.state_dict()
    adapted = set()
    for key, a in adapter.items():
        if ".lora_A." not in key:
            continue
        module = key.removeprefix("base_model.model.").split(".lora_A.")[0]
        b = adapter[key.replace(".lora_A.", ".lora_B.")]
        assert b.abs().max() > 0, "training must have moved the adapter, or the merge is not tested"
        torch.testing.assert_close(state[f"{module}.weight"], base_state[f"{module}.weight"] + 8 / 4 * b @ a,
                                   atol=1e-6, rtol=1e-5)
        adapted.add(f"{module}.weight")
    assert len(adapted) == 4  # 2 layers x (o_proj, down_proj)
    assert all(torch.equal(state[k], v) for k, v in base_state.items() if k not in adapted)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy"]["kind"] == "lora_merged" and manifest["policy"]["base_model"] == str(base)

    # the base model gone: one line naming it, and --base-model points at a copy
    moved = shutil.move(base, tmp_path / "base_moved")
    assert export([str(checkpoint), "--out", str(tmp_path / "again")]) == 2
    assert not (tmp_path / "again").exists()
    assert export([str(checkpoint), "--out", str(tmp_path / "again"), "--base-model", str(moved)]) == 0
    assert greedy_tokens(AutoModelForCausalLM.from_pretrained(tmp_path / "again"), tokenizer) == \
        greedy_tokens(exported, tokenizer)


def damaged(checkpoint: Path, tmp_path: Path, how: str) -> Path:
    copy = tmp_path / "damaged" / checkpoint.name
    shutil.copytree(checkpoint, copy)
    if how == "no policy":
        shutil.rmtree(copy / "policy")
    elif how == "truncated weights":
        weights = copy / "policy" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "edited library":
        library = copy / "library" / "experience_library.json"
        document = json.loads(library.read_text())
        document["payload"]["library"]["entries"][0]["support"] += 1  # its checksum no longer matches
        library.write_text(json.dumps(document))
    elif how == "no trainer state":
        (copy / "trainer_state.json").unlink()
    return copy


@pytest.mark.parametrize("how, says", [
    ("no policy", "policy is missing"),
    ("truncated weights", "cannot be loaded as a Hugging Face model"),
    ("edited library", "checksum mismatch"),
    ("no trainer state", "is not a checkpoint"),
])
def test_a_damaged_checkpoint_is_one_error_line(full_checkpoint, tmp_path, capsys, how, says):
    source = damaged(full_checkpoint, tmp_path, how)
    assert export([str(source), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err and str(source) in err, err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


def test_bad_arguments_are_one_error_line(full_checkpoint, tmp_path, capsys):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = [
        ([str(tmp_path / "missing"), "--out", str(tmp_path / "o")], "is not a folder"),
        ([str(tmp_path / "busy"), "--out", str(tmp_path / "o")], "is not a checkpoint"),
        ([str(full_checkpoint), "--out", str(tmp_path / "busy"), "--force"], "is not an earlier export"),
        ([str(full_checkpoint), "--out", str(full_checkpoint / "export")], "would replace or write into"),
        ([str(full_checkpoint), "--out", str(full_checkpoint.parent), "--force"], "would replace or write into"),
        ([str(full_checkpoint), "--out", str(full_checkpoint.parent / "exports" / "x")], "inside the run folder"),
    ]
    for argv, says in cases:
        assert export(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, (argv, err)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    assert not (full_checkpoint / "export").exists()

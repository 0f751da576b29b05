"""``slea-rl export`` of a verl checkpoint whose actor trained a LoRA adapter: verl's model merger splits the
shards into base weights and ``lora_adapter/`` (with ``lora_train_meta.json``'s rank and alpha), and the export
merges the adapter into the base. The checkpoint is written here the way verl's FSDP checkpoint manager lays it
out for one rank (the actor's state dict with peft's names, ``fsdp_config.json``, ``lora_train_meta.json``, the
model's config and tokenizer in ``huggingface/``): a CPU run with LoRA would cost minutes for the same files."""

import json
import shutil
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent_system.testing.greedy import greedy_tokens
from recipe.forge.hf.tiny import save_tiny_model_dir
from recipe.forge.commands.export import main as export


def write_verl_lora_checkpoint(tmp_path: Path, target_modules: list[str], meta: bool = True):
    """A one-rank verl checkpoint of a tiny Llama with a LoRA adapter (random B, so it changes the model);
    returns (the checkpoint folder, the actor model, the base model folder)."""
    base = save_tiny_model_dir(tmp_path / "base")
    torch.manual_seed(0)
    actor_model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(
        r=4, lora_alpha=8, target_modules=target_modules, init_lora_weights=False, task_type="CAUSAL_LM"))
    actor = tmp_path / "run" / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(actor_model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    if meta:
        (actor / "lora_train_meta.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "task_type": "CAUSAL_LM"}))
    for item in Path(base).iterdir():  # verl's huggingface/ holds all but the weights
        if item.suffix != ".safetensors":
            shutil.copy(item, actor / "huggingface" / item.name)
    return actor.parent, actor_model, base


def test_a_verl_lora_checkpoint_exports_with_the_adapter_merged(tmp_path):
    checkpoint, actor_model, base = write_verl_lora_checkpoint(tmp_path, ["o_proj", "down_proj"])
    actor = checkpoint / "actor"

    out = tmp_path / "export"
    assert export([str(checkpoint), "--out", str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out)
    state = exported.state_dict()
    assert not any("lora" in name for name in state) and not (out / "lora_adapter").exists()
    # verl's merger rounds every tensor to bf16; the adapter is merged onto those weights: W + (alpha / r) B A
    shards = {k: v.bfloat16().float() for k, v in actor_model.state_dict().items()}
    adapted = 0
    for key, weight in state.items():
        module = f"base_model.model.{key.removesuffix('.weight')}"
        if f"{module}.lora_A.default.weight" in shards:
            a, b = shards[f"{module}.lora_A.default.weight"], shards[f"{module}.lora_B.default.weight"]
            torch.testing.assert_close(weight, shards[f"{module}.base_layer.weight"] + 8 / 4 * b @ a)
            adapted += 1
    assert adapted == 4  # 2 layers x (o_proj, down_proj)
    assert greedy_tokens(exported, AutoTokenizer.from_pretrained(out)) == \
        greedy_tokens(actor_model.merge_and_unload(), AutoTokenizer.from_pretrained(base))
    assert json.loads((out / "manifest.json").read_text())["policy"] == {
        "kind": "lora_merged", "source": str(actor), "merged_by": "verl.model_merger (fsdp)", "dtype": "float32"}


def test_a_verl_lora_adapter_without_its_alpha_is_refused(tmp_path, capsys):
    checkpoint, _, _ = write_verl_lora_checkpoint(tmp_path, ["o_proj"], meta=False)
    capsys.readouterr()  # what writing it printed
    # no lora_train_meta.json: verl's merger would give the adapter alpha 0, and merging it would change nothing
    assert export([str(checkpoint), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lora_train_meta.json" in err and not (tmp_path / "export").exists()

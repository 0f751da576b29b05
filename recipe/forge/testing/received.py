"""What a received checkpoint or run folder may hold, built for the attacks on ``slea-rl eval`` / ``export`` and
resumes (tests/local_engine/test_received_checkpoints.py, scripts/reliability_attacks/received.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


class RunsCode:
    """Unpickling this runs ``touch <marker>``: what a planted pickle in a checkpoint file could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant_code(path: Path, marker: Path) -> None:
    """Replace the torch file ``path`` with one whose unpickling creates ``marker``."""
    import torch

    torch.save({"weight": RunsCode(marker)}, path)


def write_verl_checkpoint(folder: Path, model_dir: str | Path) -> Path:
    """``folder`` (``<run>/global_step_<k>``) laid out as verl's FSDP checkpoint manager writes one rank's checkpoint
    of the Hugging Face model in ``model_dir``: the actor's state dict as ``model_world_size_1_rank_0.pt``,
    ``fsdp_config.json`` and the model's config and tokenizer in ``actor/huggingface/``. Returns ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM

    actor = Path(folder) / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(AutoModelForCausalLM.from_pretrained(model_dir).state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for item in Path(model_dir).iterdir():  # verl's huggingface/ holds all but the weights
        if item.suffix != ".safetensors":
            shutil.copy(item, actor / "huggingface" / item.name)
    return Path(folder)

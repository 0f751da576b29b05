"""The tiny random vision-language model (recipe/forge/hf/tiny_vlm.py, scripts/make_tiny_vlm.py): its
folder loads by path like any HF model folder, its processor turns a chat with one image into Qwen's model
inputs, and the model generates from them on the CPU within seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from recipe.forge.hf.tiny_vlm import save_tiny_vlm_dir
from recipe.forge.hf.vision_processor import load_processor

REPO = Path(__file__).resolve().parents[2]
IMAGE = np.random.default_rng(0).integers(0, 256, size=(56, 56, 3), dtype=np.uint8)
# (architecture, patch side in pixels): the image processor resizes to a whole number of 2x2-patch blocks
FAMILIES = {"qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", 14),
            "qwen3_vl": ("Qwen3VLForConditionalGeneration", 16)}


def check_folder(folder: Path, family: str) -> None:
    """Load ``folder`` by path and run one chat with one image through the processor and ``generate``."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    architecture, patch = FAMILIES[family]
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [architecture] and "vision_config" in config
    processor = load_processor(str(folder))
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    assert type(model).__name__ == architecture

    chat = [{"role": "user", "content": [{"type": "image", "image": Image.fromarray(IMAGE)},
                                         {"type": "text", "text": "Where is the box?"}]}]
    inputs = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    # every image becomes 4x4 patches of patch x patch pixels (56x56 resized to 64x64 for 16-pixel patches), and
    # each 2x2 block of patches one image token
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert inputs["pixel_values"].shape == (16, 3 * 2 * patch * patch)  # channels x 2 frames x patch pixels
    ids = inputs["input_ids"][0].tolist()
    pad, start, end = processor.tokenizer.convert_tokens_to_ids(["<|image_pad|>", "<|vision_start|>", "<|vision_end|>"])
    assert pad == config["image_token_id"] and start == config["vision_start_token_id"]
    first = ids.index(start)
    assert ids[first:first + 6] == [start, pad, pad, pad, pad, end] and ids.count(pad) == 4
    text = processor.tokenizer.decode(ids)
    assert text.endswith("Where is the box?<|im_end|>\n<|im_start|>assistant\n")
    # the tokenizer alone renders the chat as the processor does, before the pad is expanded
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        text.replace("<|image_pad|>" * 4, "<|image_pad|>")

    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False, min_new_tokens=16)
    elapsed = time.perf_counter() - started
    assert out.shape == (1, len(ids) + 16) and out[0, :len(ids)].tolist() == ids
    assert elapsed < 10.0, f"16 tokens took {elapsed:.1f} s"  # about 0.5 s on 2 shared cores


def test_the_tiny_qwen2_5_vl_folder_loads_processes_an_image_and_generates(tiny_vlm_dir):
    check_folder(tiny_vlm_dir, "qwen2_5_vl")


def test_the_script_writes_a_tiny_qwen3_vl_folder(tmp_path):
    out = tmp_path / "tiny-qwen3-vl"
    proc = subprocess.run([sys.executable, "scripts/make_tiny_vlm.py", "--out", str(out), "--family", "qwen3_vl"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    check_folder(out, "qwen3_vl")


def test_the_same_seed_gives_the_same_weights_and_another_seed_others(tmp_path, tiny_vlm_dir):
    from safetensors.torch import load_file

    def weights(folder):
        return load_file(str(Path(folder) / "model.safetensors"))

    first, again = weights(tiny_vlm_dir), weights(save_tiny_vlm_dir(tmp_path / "again"))
    other = weights(save_tiny_vlm_dir(tmp_path / "other", seed=1))
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    for name in ("model.embed_tokens.weight", "visual.patch_embed.proj.weight"):  # the language model, the vision tower
        assert not torch.equal(first[name], other[name])


def test_a_bad_family_or_output_path_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"family='llava' is not one of \['qwen2_5_vl', 'qwen3_vl'\]"):
        save_tiny_vlm_dir(tmp_path / "x", family="llava")
    taken = tmp_path / "a_file"
    taken.write_text("")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        save_tiny_vlm_dir(taken)

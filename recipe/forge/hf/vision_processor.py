"""A vision-language model's processor (image processor, tokenizer, chat template), loaded by path.

transformers' Qwen-VL processors hold a video processor next to the image processor, and transformers accepts
one only where torchvision is installed. The CPU install has no torchvision (its PyPI wheels are CUDA builds that
do not load against the CPU torch), so there no Qwen-VL processor can be built at all, although images need
only the image processor, whose PIL backend runs without torchvision.
:func:`allow_processors_without_torchvision` lets a processor hold transformers' base video processor in that
case; a folder whose video processor is that base one (the tiny VLM of tiny_vlm.py) then loads, and only a
video input fails. Where torchvision is installed nothing changes. A folder naming a model's own video processor
(a real Qwen2.5-VL) still needs torchvision.
"""

from __future__ import annotations


def allow_processors_without_torchvision() -> None:
    """Without torchvision, let processors hold transformers' base video processor (see the module docstring)."""
    from transformers import processing_utils, video_processing_utils
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return
    # processing_utils checks a processor's parts against the classes of this transformers module object, where
    # a dummy that refuses every use stands for each class that needs torchvision; the base video processor
    # needs torchvision only to process a video.
    processing_utils.transformers_module.BaseVideoProcessor = video_processing_utils.BaseVideoProcessor


def load_processor(path: str):
    """``AutoProcessor.from_pretrained`` of the model at ``path`` (a folder, the SmolLM2 alias or a cached hub id),
    after :func:`allow_processors_without_torchvision`."""
    from transformers import AutoProcessor

    from recipe.forge.hf.model_paths import resolve_model_path

    allow_processors_without_torchvision()
    return AutoProcessor.from_pretrained(resolve_model_path(path))

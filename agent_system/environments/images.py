"""What an image observation must be before any engine uses it: an HxWx3 uint8 array (the environments render
RGB frames) of at most :data:`MAX_IMAGE_SIDE` pixels a side and :data:`MAX_IMAGE_PIXELS` in all.

Every engine takes its images from the environment managers (agent_system/environments/base.py), which check
each observation's ``info["image"]`` here: a malformed or oversized one (a float or object array, a flat or
4-channel one, an empty one, a 20,000-pixel-wide one, not an array at all) ends that episode as failed with
the problem as its ``failure_reason``, and never reaches a processor, a GPU or an endpoint request. The bound
keeps one image under 12.6 MB of pixels (a PNG data URL of the prompt-only engine under about 17 MB, the usual
endpoint limit being 20 MB); the environments here render a few hundred pixels a side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_IMAGE_SIDE = 4096
MAX_IMAGE_PIXELS = 2048 * 2048


def image_problem(image: Any) -> str | None:
    """Why ``image`` is not an image observation this project takes (one line), or None."""
    if not isinstance(image, np.ndarray):
        return f"is a {type(image).__name__}, not an HxWx3 uint8 array"
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        return f"is a {image.dtype} array of shape {tuple(image.shape)[:6]}, not an HxWx3 uint8 array"
    return size_problem(*image.shape[:2])


def size_problem(height: int, width: int) -> str | None:
    """Why an image of ``height`` x ``width`` pixels is not taken (one line), or None."""
    if not (0 < height <= MAX_IMAGE_SIDE and 0 < width <= MAX_IMAGE_SIDE) or height * width > MAX_IMAGE_PIXELS:
        return (f"is {height}x{width} pixels; at most {MAX_IMAGE_SIDE} a side and {MAX_IMAGE_PIXELS:,} in all "
                "are taken")
    return None


def checked_image(info: dict[str, Any]) -> dict[str, Any]:
    """A copy of an environment's ``info`` whose ``image``, when malformed (:func:`image_problem`), is dropped and
    named in ``failure_reason`` (an episode that ends failed)."""
    info = dict(info)
    image = info.get("image")
    problem = None if image is None else image_problem(image)
    if problem is not None:
        del info["image"]
        info.setdefault("failure_reason", f"the environment's image observation {problem}")
    return info

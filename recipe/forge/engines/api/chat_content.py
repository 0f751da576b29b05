"""Chat messages as an OpenAI-compatible endpoint takes them.

Text content is sent as it is, a string. A multimodal turn (the ``[image, text]`` parts of an image observation,
agent_system/multi_turn_rollout/injection.py) is sent as OpenAI content parts, in order: a text part as
``{"type": "text", "text": ...}``, an image as ``{"type": "image_url", "image_url": {"url":
"data:image/png;base64,..."}}``. PNG is lossless, so the endpoint decodes exactly the observation's pixels.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from agent_system.environments.images import image_problem, size_problem
from agent_system.multi_turn_rollout.protocols import Message


def png_data_url(image: Any) -> str:
    """``image``, an HxWx3 uint8 array (as the environments render it) or a PIL image, as a base64 PNG data URL."""
    from PIL import Image

    if isinstance(image, Image.Image):
        problem = size_problem(image.height, image.width)
        if problem is not None:
            raise ValueError(f"an image observation {problem}")
        image = np.asarray(image.convert("RGB"))
    problem = image_problem(image)  # the bound of every engine's images: a request stays under about 17 MB
    if problem is not None:
        raise ValueError(f"an image observation {problem}")
    image = Image.fromarray(image)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": png_data_url(part["image"])}}
    raise ValueError(f"a message content part of type {kind!r} cannot be sent; the parts are 'text' and 'image'")


def openai_message(message: Message) -> dict[str, Any]:
    """``message`` with its content as an OpenAI chat request takes it (see the module docstring)."""
    content = message["content"]
    if isinstance(content, list):
        content = [_part(part) for part in content]
    return {"role": message["role"], "content": content}

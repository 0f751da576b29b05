"""Where the experience text goes in a step's messages: the one builder both engines use.

Placements (``algorithm.forge.injection``):

* ``system``: ``[system: experiences, user: prompt]``, the SLEA-RL paper's placement;
* ``user_prefix``: ``[user: experiences + blank line + prompt]``;
* ``user_suffix``: ``[user: prompt + blank line + experiences]``: the lessons stand right before the answer,
  where a small model reads them (``scripts/probe_experience_use.py`` measures each placement).

An empty experience text gives ``[user: prompt]`` whatever the placement. With an image the user turn is
``[image, text]`` parts and the experiences join the text part.
"""

from __future__ import annotations

from typing import Any

from agent_system.multi_turn_rollout.protocols import Message

INJECTIONS = ("system", "user_prefix", "user_suffix")


def check_injection(placement: str) -> str:
    """``placement`` if it is one of :data:`INJECTIONS`, else a ValueError naming the choices."""
    if placement not in INJECTIONS:
        raise ValueError(f"injection={placement!r} is not one of {list(INJECTIONS)}")
    return placement


def user_message(text: str, image: Any | None = None) -> Message:
    """The user turn: text only, or ``[image, text]`` parts when the environment renders images (``image`` is
    passed through as given: an HxWx3 array for the local engine, a PIL image for verl's)."""
    if image is None:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}


def experience_messages(experience_text: str, prompt: str, placement: str = "system",
                        image: Any | None = None) -> list[Message]:
    """The messages of one step: ``prompt`` (the observation prompt) with ``experience_text`` placed as
    ``placement`` says (see the module docstring)."""
    check_injection(placement)
    if not experience_text:
        return [user_message(prompt, image)]
    if placement == "system":
        return [{"role": "system", "content": experience_text}, user_message(prompt, image)]
    if placement == "user_prefix":
        return [user_message(f"{experience_text}\n\n{prompt}", image)]
    return [user_message(f"{prompt}\n\n{experience_text}", image)]

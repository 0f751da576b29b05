"""Action projection: a model response -> the action text and whether the response is well formed.

A well-formed response holds exactly one complete ``<action>...</action>`` block with non-empty content
and no tags nested inside (any content holding both ``<`` and ``>``, even ``<>``, counts as a nested tag); with ``require_think`` it also needs one complete ``<think>...</think>`` block
before the action. Anything else is an invalid action (the text inside the last ``<action>`` tag, or the
whole response, is still passed on so the environment can treat it as a no-op). This never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAG = re.compile(r"</?\s*([A-Za-z_]+)\s*>")
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: object) -> str:
    """Model output as text that any encoder accepts: lone surrogates (which an OpenAI-compatible endpoint can
    return as ``\\ud800`` in its JSON, and which UTF-8 cannot encode) become U+FFFD; a non-string becomes ""."""
    if not isinstance(text, str):
        return ""
    return _SURROGATE.sub("\ufffd", text)



@dataclass(frozen=True)
class ParsedAction:
    action: str  # text inside the action tag, stripped ("" when there is none)
    think: str | None  # text inside the think tag, when present
    valid: bool
    reason: str | None  # why the response is malformed (None when valid)


def _blocks(text: str, tag: str) -> tuple[list[tuple[int, int, str]], int, int]:
    """Complete ``<tag>...</tag>`` blocks (start, end, inner text), and counts of open and close tags."""
    open_re = re.compile(rf"<\s*{tag}\s*>", re.IGNORECASE)
    close_re = re.compile(rf"<\s*/\s*{tag}\s*>", re.IGNORECASE)
    opens = [m for m in open_re.finditer(text)]
    closes = [m for m in close_re.finditer(text)]
    blocks = []
    pos = 0
    for o in opens:
        if o.start() < pos:
            continue
        c = close_re.search(text, o.end())
        if c is None:
            break
        blocks.append((o.start(), c.end(), text[o.end() : c.start()]))
        pos = c.end()
    return blocks, len(opens), len(closes)


def parse_tagged_response(text: str | None, require_think: bool = False, action_tag: str = "action") -> ParsedAction:
    """Parse ``<think>..</think><action>..</action>``; see the module docstring for what is valid."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    blocks, n_open, n_close = _blocks(text, action_tag)
    if not blocks:
        return ParsedAction(action="", think=None, valid=False, reason=f"no complete <{action_tag}> block")
    start, _end, inner = blocks[-1]
    action = inner.strip()
    think_blocks, t_open, t_close = _blocks(text[:start], "think")
    think = think_blocks[-1][2].strip() if think_blocks else None
    reason = None
    if len(blocks) > 1 or n_open != 1 or n_close != 1:
        reason = f"expected exactly one <{action_tag}> block"
    elif _TAG.search(inner) or ("<" in inner and ">" in inner):
        reason = f"tags nested inside <{action_tag}>"
    elif not action:
        reason = f"empty <{action_tag}>"
    elif require_think and (len(think_blocks) != 1 or t_open != 1 or t_close != 1):
        reason = "expected exactly one <think> block before the action"
    elif t_open != t_close:
        reason = "unbalanced <think> tags"
    return ParsedAction(action=action, think=think, valid=reason is None, reason=reason)

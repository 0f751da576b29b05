"""Size limits of the experience system: one rule to quote a text in a lesson, one to compare a long text.

Observations, actions and tasks come from environments and from the policy's own answers, so any of them can be
huge (a 100,000-character one-word answer, a 5 MB page). Two rules keep everything the experience system makes
from them bounded:

* :func:`shorten` quotes a text inside a lesson: on one line, cut to a number of characters with an ellipsis.
  Every extractor quotes actions, observations and tasks through it (the limits are its callers': a state 160
  characters, an action 80, a task 100 to 120, a listed action 40); :func:`cut` bounds a whole lesson's text
  (``algorithm.forge.max_lesson_chars``) the same way, without changing its spacing.
* :func:`bounded_key` is what the observation index, the retrieval fallback and the task search compare, and
  what they store (cluster prototypes, entry keys and tasks, the states and actions of a lesson's advice): the
  text itself up to ``max_chars`` characters (``algorithm.forge.max_key_chars``, 8,192 by default), so every
  observation of normal size (every environment here: a few KB at most) clusters exactly as before; a longer
  text becomes its first characters followed by its length and a SHA-256 digest of the whole, ``max_chars``
  characters in all. Two long texts with the same key are equal (up to a 128-bit digest collision); their
  similarity is that of their first ``max_chars`` characters or so, so the work of one comparison, and the size
  of what is stored, no longer grows with the text.
"""

from __future__ import annotations

import hashlib
import re

MAX_QUOTE = 160  # a quoted state (observation) in a lesson
MAX_KEY_CHARS = 8192  # default of algorithm.forge.max_key_chars
MAX_LESSON_CHARS = 1000  # default of algorithm.forge.max_lesson_chars
MIN_KEY_CHARS = 256  # a key must hold the digest marker and a prefix worth comparing
MIN_LESSON_CHARS = 40  # a lesson cut shorter than this says nothing
ELLIPSIS = "..."

_WORD = re.compile(r"\S+")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace made one space, trimmed."""
    return " ".join(text.split())


def cut(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its first ``limit - 3`` (trailing spaces
    dropped) and an ellipsis: at most ``limit`` characters either way."""
    return text if len(text) <= limit else text[: max(limit - len(ELLIPSIS), 0)].rstrip() + ELLIPSIS


def shorten(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` on one line (:func:`one_line`), cut to ``limit`` characters with an ellipsis (:func:`cut`).
    Reads only as many words as the quote needs, so quoting a huge text costs no more than quoting its start."""
    words: list[str] = []
    size = -1
    for match in _WORD.finditer(text):
        words.append(match.group())
        size += len(words[-1]) + 1
        if size > limit:
            break
    return cut(" ".join(words), limit)


def bounded_key(text: str, max_chars: int = MAX_KEY_CHARS) -> str:
    """``text`` itself when it has at most ``max_chars`` characters; else its start followed by
    `` ...[<n> characters, sha256 <32 hex digits>]`` (n: the whole text's length, the digest of its UTF-8
    bytes), exactly ``max_chars`` characters in all. Idempotent: a key is its own key."""
    if len(text) <= max_chars:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    marker = f" ...[{len(text)} characters, sha256 {digest}]"
    return text[: max_chars - len(marker)] + marker

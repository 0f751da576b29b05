"""Model-, user- or endpoint-written text made inert for the places it is shown: a terminal (the console
view, log and error lines) and Markdown (the library export).

Every control character (C0 but tab and newline, DEL, C1: the ANSI/OSC escapes that clear a screen or set a
terminal title) and every bidirectional-override character becomes a visible escape such as ``\\x1b`` or
``\\u202e``, so the text is still readable and nothing reaches the terminal as a command. For Markdown the
text is additionally escaped so that no HTML tag, entity, link, image or emphasis can be formed from it.
"""

from __future__ import annotations

import html
import re

from agent_system.environments.projection import valid_unicode

# C0 controls, DEL, C1 controls, the bidirectional marks, embeddings, overrides and isolates, line separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# the ASCII punctuation that both CommonMark and Python-Markdown accept backslash escapes for and that can
# start markup inline: code, emphasis, links and images, attribute lists, headings
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#!])")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_text(text: object, keep_newlines: bool = False) -> str:
    """``text`` with every control and bidi character shown as its escape (``\\x1b``); newlines too unless
    ``keep_newlines`` (a multi-line message), so a one-line field stays on its line. Lone surrogates become
    U+FFFD, a non-string its ``str``."""
    text = valid_unicode(text if isinstance(text, str) else str(text))
    if keep_newlines:
        return "\n".join(_CONTROL.sub(_visible, line) for line in text.split("\n"))
    return _CONTROL.sub(_visible, text)


def markdown_text(text: object) -> str:
    """``text`` as one line of inert inline Markdown (a table cell, a list item): controls as in
    ``terminal_text``, Markdown punctuation backslash-escaped, ``& < >`` as HTML entities and ``|`` as
    ``&#124;`` (it would end a table cell). Rendered, it shows the original text and nothing else."""
    escaped = _MARKDOWN_PUNCTUATION.sub(r"\\\1", terminal_text(text))
    return html.escape(escaped, quote=False).replace("|", "&#124;")

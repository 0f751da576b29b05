"""Rendering retrieved entries into the experience text, capped at ``max_tokens`` tokens.

Styles (``experience_style``):

* ``compact``: a header line, then one line per entry, marked by its zone in words;
* ``verbose``: a header, then per entry its zone, level, score and support, then the text.

Lesson styles (``lesson_style``, shared with the rule extractor):

* ``descriptive``: what happened (compact marks ``Worked:`` golden, ``Failed:`` warning);
* ``imperative``: what to do (compact marks ``Do:`` golden, ``Warning:`` warning, and an instruction header).
  A warning's own words say what to do or not to do ("Do not repeat ...", "answer with <action>-</action>
  instead of ..."), so its mark is neutral: a mark ``Avoid:`` would turn "Answer with an admissible action"
  into its opposite.

The marks are words, never symbols: an environment's actions can be symbols (NumberLine answers ``+`` or
``-``), and a mark that is an action would put that action into every prompt, whatever the lesson says.

The token count is the policy tokenizer's (``len(tokenizer.encode(text, add_special_tokens=False))``); without
a tokenizer (the prompt-only engine), whitespace-separated words stand in for tokens, a word longer than
:data:`WORD_CHARS` characters counting one token per started :data:`WORD_CHARS` characters (so that one long
word, a 100,000-character answer quoted in a lesson, cannot pass as one token): a text of ``n`` stand-in tokens
has at most ``n * (WORD_CHARS + 1)`` characters. Entries are added best first while they fit; the first entry
that does not fit is cut at the remaining token budget and rendering stops, so the result never exceeds
``max_tokens``.
"""

from __future__ import annotations

from typing import Any, Sequence

from recipe.forge.experience.library import GOLDEN, ExperienceEntry

STYLES = ("compact", "verbose")
WORD_CHARS = 16  # without a tokenizer, a word counts one token per started WORD_CHARS characters
LESSON_STYLES = ("descriptive", "imperative")
HEADER = {
    ("compact", "descriptive"): "Lessons from past episodes:",
    ("compact", "imperative"): "Follow these lessons from past episodes:",
    ("verbose", "descriptive"): "Experience library: strategies that worked (golden) and mistakes to avoid (warning).",
    ("verbose", "imperative"): "Experience library: follow the strategies (golden), avoid the mistakes (warning).",
}
MARK = {  # (lesson style, zone is golden) -> compact mark
    ("descriptive", True): "Worked:", ("descriptive", False): "Failed:",
    ("imperative", True): "Do:", ("imperative", False): "Warning:",
}


def check_lesson_style(style: str) -> str:
    """``style`` if it is one of :data:`LESSON_STYLES`, else a ValueError naming the choices."""
    if style not in LESSON_STYLES:
        raise ValueError(f"lesson_style={style!r} is not one of {list(LESSON_STYLES)}")
    return style


def _word_tokens(word: str) -> int:
    """Stand-in tokens of one whitespace-free ``word``: one per started :data:`WORD_CHARS` characters."""
    return -(-len(word) // WORD_CHARS)


class ExperienceRenderer:
    def __init__(self, max_tokens: int, style: str = "compact", tokenizer: Any | None = None,
                 lesson_style: str = "descriptive"):
        if style not in STYLES:
            raise ValueError(f"experience_style={style!r} is not one of {list(STYLES)}")
        if max_tokens < 1:
            raise ValueError(f"max_experience_length={max_tokens} must be >= 1")
        self.max_tokens = int(max_tokens)
        self.style = style
        self.lesson_style = check_lesson_style(lesson_style)
        self.tokenizer = tokenizer

    def count(self, text: str) -> int:
        """``text``'s length in tokens: the tokenizer's, or the stand-in's (the module docstring)."""
        if self.tokenizer is None:
            return sum(map(_word_tokens, text.split()))
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def truncate(self, text: str, budget: int) -> str:
        """The longest prefix of ``text`` of at most ``budget`` tokens (whole tokens; without a tokenizer, whole
        words, and of the first word that does not fit its first stand-in tokens, joined by single spaces)."""
        if budget <= 0:
            return ""
        if self.tokenizer is None:
            words: list[str] = []
            for word in text.split():
                size = _word_tokens(word)
                if size > budget:
                    words.append(word[: budget * WORD_CHARS])
                    break
                words.append(word)
                budget -= size
                if budget == 0:
                    break
            return " ".join(w for w in words if w)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[:budget]
        cut = self.tokenizer.decode(ids, skip_special_tokens=True)
        while ids and self.count(cut) > budget:  # a decode/encode round trip can merge differently
            ids = ids[:-1]
            cut = self.tokenizer.decode(ids, skip_special_tokens=True)
        return cut

    def line(self, entry: ExperienceEntry) -> str:
        """One line per entry (a newline in its text becomes a space): the rendered text is its header and then
        one line per shown entry, which the prompt-length rule drops from the last (prompt_fit.py)."""
        text = entry.text.replace("\n", " ")
        if self.style == "compact":
            return f"{MARK[(self.lesson_style, entry.zone == GOLDEN)]} {text}"
        return f"[{entry.zone}/{entry.level} score={entry.score:.2f} support={entry.support}] {text}"

    def render(self, entries: Sequence[ExperienceEntry]) -> tuple[str, tuple[int, ...]]:
        """(experience text, ids of the entries that made it in, fully or cut). Empty text for no entries."""
        if not entries:
            return "", ()
        header = HEADER[(self.style, self.lesson_style)]
        if self.count(header) >= self.max_tokens:
            return self.truncate(header, self.max_tokens), ()
        lines = [header]
        shown: list[int] = []
        for entry in entries:
            text = self.line(entry)
            if self.count("\n".join(lines + [text])) <= self.max_tokens:
                lines.append(text)
                shown.append(entry.entry_id)
                continue
            budget = self.max_tokens - self.count("\n".join(lines))
            while budget > 0:  # joining can tokenize differently: shrink until the whole message fits
                cut = self.truncate(text, budget)
                if not cut.strip():
                    break
                if self.count("\n".join(lines + [cut])) <= self.max_tokens:
                    lines.append(cut)
                    shown.append(entry.entry_id)
                    break
                budget -= 1
            break
        return "\n".join(lines), tuple(shown)

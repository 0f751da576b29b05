"""Answer normalisation and exact match as in SQuAD / Search-R1: lower-case, drop punctuation and the
articles a / an / the, collapse white space."""

from __future__ import annotations

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", str(text).lower().translate(_PUNCT)).split())


def exact_match(prediction: str, golden_answers: list[str]) -> bool:
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in golden_answers)

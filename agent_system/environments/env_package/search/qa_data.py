"""QA data the Search environment reads: parquet or JSONL rows with a question and its gold answers.

Accepted row forms (what ``examples/data_preprocess/preprocess_search_r1_dataset.py`` writes, and
Search-R1's own files): ``question`` plus ``golden_answers`` (list) or ``reward_model.ground_truth.target``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agent_system.json_input import loads as read_json


@dataclass(frozen=True)
class QARow:
    question: str
    golden_answers: tuple[str, ...]
    data_source: str = "unknown"


def _answers(row: dict, where: str) -> tuple[str, ...]:
    answers = row.get("golden_answers")
    if answers is None:
        target = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
        answers = target
    if isinstance(answers, str):
        answers = [answers]
    if answers is None or len(answers) == 0:
        raise ValueError(f"{where}: row has no gold answers (golden_answers or reward_model.ground_truth.target)")
    return tuple(str(a) for a in answers)


@functools.lru_cache(maxsize=8)
def load_qa(path: str) -> tuple[QARow, ...]:
    """Rows of a .parquet or .jsonl file (cached per process: every environment copy shares them)."""
    if path.endswith(".parquet"):
        import pandas as pd

        records = pd.read_parquet(path).to_dict(orient="records")
        records = [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()} for r in records]
    else:
        with open(path, encoding="utf-8") as f:
            records = [read_json(line, f"{path}:{number}") for number, line in enumerate(f, 1) if line.strip()]
    rows = []
    for k, r in enumerate(records):
        where = f"{path} row {k}"
        question = r.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{where}: row has no 'question' string")
        rows.append(QARow(question.strip(), _answers(r, where), str(r.get("data_source", "unknown"))))
    if not rows:
        raise ValueError(f"{path}: no QA rows")
    return tuple(rows)

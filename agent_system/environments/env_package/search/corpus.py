"""The retrieval corpus: a JSONL file of ``{"id": ..., "contents": ...}`` rows (the Search-R1 / wiki-18 form,
where ``contents`` is ``"Title"\\ntext``), and how a retrieved passage is shown to the agent."""

from __future__ import annotations

import json
from dataclasses import dataclass

from agent_system.json_input import loads as read_json


@dataclass(frozen=True)
class Passage:
    id: str
    contents: str

    @property
    def title(self) -> str:
        head, _, _ = self.contents.partition("\n")
        return head.strip().strip('"')

    @property
    def text(self) -> str:
        head, sep, body = self.contents.partition("\n")
        return body.strip() if sep else head.strip()


def load_corpus(path: str) -> list[Passage]:
    """Read a JSONL corpus; a row without a string ``contents`` is an error naming the line."""
    passages = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = read_json(line, f"{path}:{lineno}")  # a ValueError of one line for anything but JSON it reads
            if not isinstance(row, dict) or not isinstance(row.get("contents"), str):
                raise ValueError(f"{path}:{lineno}: a corpus row needs a string 'contents' field")
            passages.append(Passage(str(row.get("id", lineno - 1)), row["contents"]))
    if not passages:
        raise ValueError(f"{path}: the corpus is empty")
    return passages


def write_corpus(path: str, passages: list[Passage]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps({"id": p.id, "contents": p.contents}) + "\n")


def format_passages(docs: list[dict]) -> str:
    """Retrieved documents (``{"contents": ...}`` dicts, best first) as the agent reads them:
    ``Doc 1(Title: ...) text`` lines."""
    lines = []
    for k, doc in enumerate(docs, 1):
        p = Passage(str(doc.get("id", "")), str(doc.get("contents", "")))
        lines.append(f"Doc {k}(Title: {p.title}) {p.text}")
    return "\n".join(lines)

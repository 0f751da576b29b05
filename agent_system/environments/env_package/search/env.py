"""SearchEnv: one Search-R1 episode. The agent either searches (``<search>query</search>`` -> the top-k
passages in ``<information>``) or answers (``<answer>text</answer>`` -> episode ends, reward 1 on an exact
match after normalisation, else 0). A retrieval failure (server down, slow, error status) becomes an
error observation and the episode goes on."""

from __future__ import annotations

import re
from typing import Any

from agent_system.environments.episode import AgentEnv
from agent_system.environments.env_package.search.answers import exact_match
from agent_system.environments.env_package.search.client import RetrievalClient, RetrievalError
from agent_system.environments.env_package.search.corpus import format_passages
from agent_system.environments.env_package.search.qa_data import load_qa

_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
INVALID_ACTION_OBS = (
    "Your previous response held no action. To search, put a query between <search> and </search>. "
    "To give the final answer, put it between <answer> and </answer>."
)


def parse_search_action(text: str) -> tuple[str, str] | None:
    """("search" | "answer", content) of the first complete, non-empty block, else None."""
    for m in _BLOCK.finditer(text or ""):
        content = m.group(2).strip()
        if content:
            return m.group(1).lower(), content
    return None


class SearchEnv(AgentEnv):
    def __init__(self, qa_file: str, search_url: str, topk: int = 3, timeout_s: float = 10.0):
        self.rows = load_qa(qa_file)
        self.topk = topk
        self.client = RetrievalClient(search_url, timeout_s)
        self._row = None
        self._searched = False
        self._done = False

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self._row = self.rows[int(seed) % len(self.rows)]
        self._searched = False
        self._done = False
        return self._row.question, self._info(won=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        parsed = parse_search_action(action)
        if parsed is None:
            return INVALID_ACTION_OBS, 0.0, False, False, self._info(won=False)
        kind, content = parsed
        if kind == "answer":
            won = exact_match(content, list(self._row.golden_answers))
            self._done = True
            return f"Your answer: {content}", 1.0 if won else 0.0, True, False, self._info(won=won, answer=content)
        try:
            retrieved: list[dict] | RetrievalError = self.client.retrieve([content], self.topk)[0]
        except RetrievalError as exc:
            retrieved = exc
        return self.search_result(retrieved)

    def search_result(self, retrieved: list[dict] | RetrievalError) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The step outcome of a search whose documents (or failure) were fetched, here or batched by the pool."""
        self._searched = True
        if isinstance(retrieved, RetrievalError):
            obs = f"<information>Search failed: {retrieved}. You may search again or answer.</information>"
            return obs, 0.0, False, False, self._info(won=False, search_error=str(retrieved))
        return f"<information>{format_passages(retrieved)}</information>", 0.0, False, False, self._info(won=False)

    def expert_action(self) -> str | None:
        """Gold-answer expert: one search for the question, then the first gold answer."""
        if self._row is None or self._done:
            return None
        if not self._searched:
            return f"<search>{self._row.question}</search>"
        return f"<answer>{self._row.golden_answers[0]}</answer>"

    def _info(self, won: bool, **extra: Any) -> dict[str, Any]:
        return {"won": won, "task": self._row.question, "task_type": self._row.data_source, **extra}

    def close(self) -> None:
        self.client.close()

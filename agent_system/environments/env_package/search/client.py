"""Client of the retrieval server: one POST per batch of queries, every failure a RetrievalError."""

from __future__ import annotations

import httpx


class RetrievalError(RuntimeError):
    """The server was unreachable, too slow, answered an error status or something unreadable."""


class RetrievalClient:
    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url
        self._http = httpx.Client(timeout=timeout_s)

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict]]:
        """Documents ({"id", "contents"}, best first) for each query."""
        try:
            response = self._http.post(self.url, json={"queries": queries, "topk": topk, "return_scores": False})
        except httpx.TimeoutException as exc:
            raise RetrievalError(f"retrieval server timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise RetrievalError(f"retrieval server unreachable ({type(exc).__name__})") from exc
        if response.status_code != 200:
            raise RetrievalError(f"retrieval server answered HTTP {response.status_code}")
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RetrievalError("retrieval server answered an unreadable body") from exc
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(f"retrieval server answered {len(result) if isinstance(result, list) else 'no'} result lists for {len(queries)} queries")
        try:
            documents = [[d.get("document", d) for d in docs] for docs in result]
        except (AttributeError, TypeError) as exc:  # a result list that is not a list of document objects
            raise RetrievalError("retrieval server answered result lists that are not lists of documents") from exc
        if not all(isinstance(d, dict) for docs in documents for d in docs):
            raise RetrievalError("retrieval server answered result lists that are not lists of documents")
        return documents

    def close(self) -> None:
        self._http.close()

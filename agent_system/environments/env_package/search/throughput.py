"""Retrieval-server throughput: queries per second at a given batch size (one POST per batch)."""

from __future__ import annotations

import time

import httpx


def measure_queries_per_second(url: str, queries: list[str], batch_size: int = 64, topk: int = 3, rounds: int = 5) -> dict:
    """Send ``rounds`` passes over ``queries`` in batches of ``batch_size``; the first batch is a warm-up."""
    batches = [queries[i : i + batch_size] for i in range(0, len(queries), batch_size)]
    with httpx.Client(timeout=60.0) as http:
        http.post(url, json={"queries": batches[0], "topk": topk}).raise_for_status()
        sent, start = 0, time.perf_counter()
        for _ in range(rounds):
            for batch in batches:
                http.post(url, json={"queries": batch, "topk": topk}).raise_for_status()
                sent += len(batch)
        elapsed = time.perf_counter() - start
    return {"batch_size": batch_size, "queries": sent, "seconds": elapsed, "queries_per_second": sent / elapsed}


def measure_builtin_server(batch_sizes: list[int], num_questions: int = 1000, rounds: int = 3) -> list[dict]:
    """Start the BM25 server on 127.0.0.1 over the generated offline corpus and measure each batch size."""
    import tempfile

    from agent_system.environments.env_package.search.local_server import LocalRetrievalServer
    from agent_system.environments.env_package.search.qa_data import load_qa
    from agent_system.environments.env_package.search.synthetic import ensure_builtin_dataset

    paths = ensure_builtin_dataset(tempfile.gettempdir() + "/slea_rl_search_bench", num_questions)
    questions = [r.question for r in load_qa(paths["train"])]
    with LocalRetrievalServer(paths["corpus"]) as server:
        return [measure_queries_per_second(server.url, questions, b, rounds=rounds) for b in batch_sizes]

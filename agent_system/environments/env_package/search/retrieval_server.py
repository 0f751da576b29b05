"""The retrieval server of the Search-R1 protocol: FastAPI + uvicorn, ``POST /retrieve``.

Request ``{"queries": [str, ...], "topk": int (optional), "return_scores": bool}``; response
``{"result": [[doc, ...] per query]}`` where ``doc`` is ``{"id", "contents"}``, or
``{"document": {"id", "contents"}, "score": float}`` with ``return_scores``. ``GET /health`` reports the
corpus size. Run it with ``examples/search/retriever/retrieval_launch.sh`` or::

    python -m agent_system.environments.env_package.search.retrieval_server --corpus corpus.jsonl --port 8000
"""

from __future__ import annotations

import argparse
import threading

from fastapi import FastAPI
from pydantic import BaseModel, Field

from agent_system.environments.env_package.search.corpus import load_corpus


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(..., max_length=4096)
    topk: int | None = Field(None, ge=1, le=1000)
    return_scores: bool = False


def create_app(retriever, default_topk: int = 3) -> FastAPI:
    """An app serving ``retriever`` (anything with ``passages`` and ``search(queries, topk)``)."""
    app = FastAPI(title="slea-rl retrieval server")
    lock = threading.Lock()  # FastAPI runs sync handlers on a thread pool; the indexes are not thread-safe

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "num_passages": len(retriever.passages)}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict:
        topk = request.topk or default_topk
        if not request.queries:
            return {"result": []}
        with lock:
            indices, scores = retriever.search(list(request.queries), topk)
        result = []
        for row_idx, row_scores in zip(indices.tolist(), scores.tolist()):
            docs = []
            for i, s in zip(row_idx, row_scores):
                if i < 0:
                    continue
                p = retriever.passages[i]
                doc = {"id": p.id, "contents": p.contents}
                docs.append({"document": doc, "score": float(s)} if request.return_scores else doc)
            result.append(docs)
        return {"result": result}

    return app


def build_retriever(args: argparse.Namespace):
    from agent_system.environments.env_package.search import retrievers

    passages = load_corpus(args.corpus)
    if args.retriever == "bm25":
        return retrievers.BM25Retriever(passages)
    if not args.model:
        raise SystemExit("--retriever dense needs --model (a local e5-style encoder folder)")
    encoder = retrievers.E5Encoder(args.model, query_prefix=args.query_prefix, passage_prefix=args.passage_prefix)
    return retrievers.DenseRetriever(passages, encoder, index_path=args.index or None)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="JSONL file of {id, contents} rows")
    parser.add_argument("--retriever", choices=["bm25", "dense"], default="bm25")
    parser.add_argument("--model", default="", help="dense: local encoder folder (e.g. e5-base-v2)")
    parser.add_argument("--index", default="", help="dense: a faiss index of the corpus (built in memory when omitted)")
    parser.add_argument("--query-prefix", default="query: ")
    parser.add_argument("--passage-prefix", default="passage: ")
    parser.add_argument("--topk", type=int, default=3, help="default topk when a request names none")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    app = create_app(build_retriever(args), default_topk=args.topk)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

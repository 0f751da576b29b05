"""The retrieval server of the Search-R1 protocol: FastAPI + uvicorn, ``POST /retrieve``.

Request ``{"queries": [str, ...], "topk": int (optional), "return_scores": bool}``; response
``{"result": [[doc, ...] per query]}`` where ``doc`` is ``{"id", "contents"}``, or
``{"document": {"id", "contents"}, "score": float}`` with ``return_scores``. ``GET /health`` reports the
corpus size. Each request is held to the server's limits (request_limits.ServerLimits: body size -> 413,
queries per request, ``topk`` and documents per answer -> 400); a malformed request is answered 400 with a
one-line ``detail``. Run it with ``examples/search/retriever/retrieval_launch.sh`` or::

    python -m agent_system.environments.env_package.search.retrieval_server --corpus corpus.jsonl --port 8000
"""

from __future__ import annotations

import argparse
import threading

from fastapi import FastAPI
from pydantic import BaseModel, StrictBool, StrictInt

from agent_system.environments.env_package.search.corpus import load_corpus
from agent_system.environments.env_package.search.request_limits import ServerLimits, install_limits


class RetrieveRequest(BaseModel):
    queries: list[str]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


def create_app(retriever, default_topk: int = 3, limits: ServerLimits = ServerLimits()) -> FastAPI:
    """An app serving ``retriever`` (anything with ``passages`` and ``search(queries, topk)``) within ``limits``."""
    limits.check(1, default_topk)  # a default topk over the limit is refused here, not at every request
    app = FastAPI(title="slea-rl retrieval server")
    install_limits(app, limits)
    lock = threading.Lock()  # FastAPI runs sync handlers on a thread pool; the indexes are not thread-safe

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "num_passages": len(retriever.passages)}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict:
        topk = default_topk if request.topk is None else request.topk
        limits.check(len(request.queries), topk)
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
    defaults = ServerLimits()
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes,
                        help="larger request bodies are answered 413 (default: %(default)s)")
    parser.add_argument("--max-queries", type=int, default=defaults.max_queries,
                        help="queries per request (default: %(default)s)")
    parser.add_argument("--max-topk", type=int, default=defaults.max_topk, help="largest topk (default: %(default)s)")
    parser.add_argument("--max-results", type=int, default=defaults.max_results,
                        help="queries x topk per request (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        limits = ServerLimits(args.max_body_bytes, args.max_queries, args.max_topk, args.max_results)
        limits.check(1, args.topk)
    except ValueError as exc:
        parser.error(str(exc))
    app = create_app(build_retriever(args), default_topk=args.topk, limits=limits)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

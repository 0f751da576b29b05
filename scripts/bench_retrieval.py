"""Retrieval-server queries per second: starts the server (BM25) over the generated offline corpus on
127.0.0.1 and sends the QA set's questions in batches.

    python scripts/bench_retrieval.py --batch-size 64 --json
"""

from __future__ import annotations

import argparse
import json
import tempfile

from agent_system.environments.env_package.search.local_server import LocalRetrievalServer
from agent_system.environments.env_package.search.qa_data import load_qa
from agent_system.environments.env_package.search.synthetic import ensure_builtin_dataset
from agent_system.environments.env_package.search.throughput import measure_queries_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--num-questions", type=int, default=1000, help="size of the generated corpus / QA set")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths = ensure_builtin_dataset(tempfile.gettempdir() + "/slea_rl_search_bench", args.num_questions)
    questions = [r.question for r in load_qa(paths["train"])]
    with LocalRetrievalServer(paths["corpus"]) as server:
        results = [measure_queries_per_second(server.url, questions, b, rounds=args.rounds) for b in args.batch_size]
    base = results[0]["queries_per_second"]
    for r in results:
        r["speedup_vs_first"] = r["queries_per_second"] / base
    if args.json:
        print(json.dumps({"corpus_passages": 2 * args.num_questions, "results": results}))
        return
    for r in results:
        print(f"batch {r['batch_size']:>4}: {r['queries_per_second']:>9.1f} queries/s  x{r['speedup_vs_first']:.2f}")


if __name__ == "__main__":
    main()

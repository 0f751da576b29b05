"""Retrieval-server queries per second: starts the server (BM25) over the generated offline corpus on
127.0.0.1 and sends the QA set's questions in batches.

    python scripts/bench_retrieval.py --batch-size 64 --json
"""

from __future__ import annotations

import argparse
import json

from agent_system.environments.env_package.search.throughput import measure_builtin_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--num-questions", type=int, default=1000, help="size of the generated corpus / QA set")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure_builtin_server(args.batch_size, args.num_questions, args.rounds)
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

#!/usr/bin/env bash
# Start the Search-R1 retrieval server (POST /retrieve) over a JSONL corpus of {"id", "contents"} rows.
#
#   bash examples/search/retriever/retrieval_launch.sh                       # BM25 over $CORPUS
#   RETRIEVER=dense MODEL=/models/e5-base-v2 INDEX=/data/e5_Flat.index \
#     bash examples/search/retriever/retrieval_launch.sh                     # e5 + faiss (pip install '.[search-dense]')
#
# With no CORPUS, the generated offline corpus (not a benchmark) is written and served.
# Point the trainer at it with env.search.search_url=http://$HOST:$PORT/retrieve env.search.launch_server=false.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY="${PY:-.venv/bin/python}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
RETRIEVER="${RETRIEVER:-bm25}"
TOPK="${TOPK:-3}"
if [ -z "${CORPUS:-}" ]; then
  CORPUS="$("$PY" -c 'from agent_system.environments.env_package.search.synthetic import ensure_builtin_dataset as e; print(e("~/.cache/slea_rl/search", 1000)["corpus"])')"
  echo "no CORPUS given: serving the generated offline corpus $CORPUS"
fi
ARGS=(--corpus "$CORPUS" --retriever "$RETRIEVER" --host "$HOST" --port "$PORT" --topk "$TOPK")
if [ "$RETRIEVER" = "dense" ]; then
  ARGS+=(--model "${MODEL:?set MODEL to a local e5-style encoder folder}")
  if [ -n "${INDEX:-}" ]; then ARGS+=(--index "$INDEX"); fi
fi
exec "$PY" -m agent_system.environments.env_package.search.retrieval_server "${ARGS[@]}"

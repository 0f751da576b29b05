"""Turn NQ / HotpotQA style QA files into the parquet files the Search environment reads
(env.search.train_data / env.search.val_data).

Input rows (JSON lines, or one JSON list such as HotpotQA's original files), any of:
  {"question": ..., "golden_answers": [...]}     (Search-R1 / FlashRAG: NQ, TriviaQA, PopQA, ...)
  {"question": ..., "answer": "..."}             (HotpotQA)
  {"question": ..., "answers": [...]}
Output columns: id, data_source, question, golden_answers, prompt (chat form of the question),
reward_model {"style": "rule", "ground_truth": {"target": [...]}}, extra_info {"split", "index"}.

    python examples/data_preprocess/preprocess_search_r1_dataset.py \
        --input nq=data/nq/train.jsonl --input hotpotqa=data/hotpot_train_v1.1.json \
        --split train --output data/search/train.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import random


def read_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        head = f.read(1)
        f.seek(0)
        if head == "[":
            return json.load(f)
        return [json.loads(line) for line in f if line.strip()]


def gold_answers(row: dict, where: str) -> list[str]:
    for key in ("golden_answers", "answers", "answer"):
        value = row.get(key)
        if value is None:
            continue
        answers = [value] if isinstance(value, str) else [str(v) for v in value]
        answers = [a.strip() for a in answers if str(a).strip()]
        if answers:
            return answers
    raise ValueError(f"{where}: no gold answer (golden_answers / answers / answer)")


def convert(sources: list[tuple[str, str]], split: str, max_rows: int, seed: int) -> list[dict]:
    rows = []
    for name, path in sources:
        for k, raw in enumerate(read_rows(path)):
            where = f"{path} row {k}"
            question = str(raw.get("question", "")).strip()
            if not question:
                raise ValueError(f"{where}: no question")
            if not question.endswith("?"):
                question += "?"
            answers = gold_answers(raw, where)
            rows.append({
                "id": str(raw.get("id", raw.get("_id", f"{name}-{k}"))),
                "data_source": name,
                "question": question,
                "golden_answers": answers,
                "prompt": [{"role": "user", "content": question}],
                "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
                "extra_info": {"split": split, "index": len(rows)},
            })
    if max_rows and len(rows) > max_rows:
        rows = random.Random(seed).sample(rows, max_rows)
        for i, r in enumerate(rows):
            r["extra_info"]["index"] = i
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", action="append", required=True, help="NAME=PATH (NAME becomes data_source)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--output", required=True, help=".parquet (or .jsonl) file to write")
    parser.add_argument("--max-rows", type=int, default=0, help="sample at most this many rows (0 = all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sources = []
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = os.path.splitext(os.path.basename(item))[0], item
        sources.append((name, path))
    rows = convert(sources, args.split, args.max_rows, args.seed)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    if args.output.endswith(".jsonl"):
        with open(args.output, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    else:
        import pandas as pd

        pd.DataFrame(rows).to_parquet(args.output, index=False)
    print(f"wrote {len(rows)} rows to {args.output}")


if __name__ == "__main__":
    main()

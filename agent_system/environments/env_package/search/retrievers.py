"""Retrievers behind the retrieval server: BM25 (bm25s, the default) and dense (e5-style encoder + faiss).

Both answer a batch at once: ``search(queries, topk) -> (indices (Q, k) int64, scores (Q, k) float32)``,
best first; an index of -1 marks "no passage" (a query with no known term under BM25).
"""

from __future__ import annotations

import numpy as np

from agent_system.environments.env_package.search.corpus import Passage


class BM25Retriever:
    """Okapi BM25 over the passages' contents (English stop words removed, lower-cased)."""

    def __init__(self, passages: list[Passage]):
        import bm25s

        self.passages = passages
        self._bm25s = bm25s
        self._index = bm25s.BM25()
        self._index.index(bm25s.tokenize([p.contents for p in passages], stopwords="en", show_progress=False), show_progress=False)

    def search(self, queries: list[str], topk: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(topk, len(self.passages))
        tokens = self._bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
        vocab = self._index.vocab_dict
        known = [[t for t in q if t in vocab] for q in tokens]
        idx = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        rows = [i for i, q in enumerate(known) if q]
        if rows:
            docs, sc = self._index.retrieve([known[i] for i in rows], k=k, show_progress=False, n_threads=1)
            idx[rows] = docs
            scores[rows] = sc
        return idx, scores


class E5Encoder:
    """Mean-pooled, L2-normalised sentence embeddings from a local transformers model folder. e5 models
    expect "query: " / "passage: " prefixes; other sentence encoders take the text as is (prefix="")."""

    def __init__(self, model_path: str, query_prefix: str = "query: ", passage_prefix: str = "passage: ", max_length: int = 256, batch_size: int = 64):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path).eval()
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.max_length = max_length
        self.batch_size = batch_size

    def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        """(len(texts), dim) float32, unit rows."""
        prefix = self.query_prefix if is_query else self.passage_prefix
        out = []
        with self._torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = [prefix + t for t in texts[start : start + self.batch_size]]
                enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
                hidden = self.model(**enc).last_hidden_state  # (B, T, D)
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(self._torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out).astype(np.float32)


class DenseRetriever:
    """Inner-product search over passage embeddings: a faiss index read from ``index_path`` when given
    (e.g. Search-R1's e5_Flat.index), else one built here from the corpus with the same encoder."""

    def __init__(self, passages: list[Passage], encoder: E5Encoder, index_path: str | None = None):
        import faiss

        self.passages = passages
        self.encoder = encoder
        if index_path:
            self._index = faiss.read_index(index_path)
            if self._index.ntotal != len(passages):
                raise ValueError(f"faiss index {index_path} holds {self._index.ntotal} vectors but the corpus has {len(passages)} passages")
        else:
            vectors = encoder.encode([p.contents for p in passages], is_query=False)
            self._index = faiss.IndexFlatIP(vectors.shape[1])
            self._index.add(vectors)

    def search(self, queries: list[str], topk: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(topk, len(self.passages))
        scores, idx = self._index.search(self.encoder.encode(queries, is_query=True), k)
        return idx.astype(np.int64), scores.astype(np.float32)

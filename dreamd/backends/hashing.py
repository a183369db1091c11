"""A deterministic hashing embedder: fast and dependency-free, for tests and benchmarks."""

from __future__ import annotations

import functools
import hashlib
import itertools
import re

import numpy as np

_WORD = re.compile(r"[a-z0-9']+")


@functools.lru_cache(maxsize=1 << 16)
def _slot(token: str, dim: int) -> tuple[int, float]:
    """Where a token adds to the vector, and with which sign: from its hash."""
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dim, 1.0 if digest[4] & 1 else -1.0


class HashingEmbedder:
    """Bag of word and bigram hashes, signed, L2-normalised. Not semantic; deterministic.

    Its CPU is a test's or a benchmark's, not what they measure: each distinct token is
    hashed once (a chat's words repeat), and a batch's vectors are summed and normalised
    by numpy at once."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model = f"hashing-{dim}"
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        cells: list[int] = []  # row * dim + slot, one per token
        signs: list[float] = []
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for token in itertools.chain(words, map(" ".join, itertools.pairwise(words))):
                slot, sign = _slot(token, self.dim)
                cells.append(row * self.dim + slot)
                signs.append(sign)
        sums = np.bincount(np.asarray(cells, dtype=np.int64), weights=signs,
                           minlength=len(texts) * self.dim)
        out = sums.reshape(len(texts), self.dim).astype(np.float32)
        norms = np.linalg.norm(out, axis=1)
        empty = norms == 0.0
        out[empty, 0] = 1.0  # a text without a word
        norms[empty] = 1.0
        result: np.ndarray = out / norms[:, None]
        return result

"""Recall: turns most relevant to a query, by vector and by words, fused.

The vectors live in an in-process matrix that grows with new rows (read by id range)
and reloads when rows disappear, so a query never reloads every embedding from SQLite.
Lexical scores come from SQLite's FTS5 (BM25). Fusion is by z-scores: reciprocal-rank
fusion threw most of the lexical gain away in our measurements (RETRIEVAL.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dreamd.store import queries as q
from dreamd.store.interface import Conn, Store
from dreamd.text import STOPWORDS

VECTOR_WEIGHT, LEXICAL_WEIGHT = 0.65, 0.35
CANDIDATES = 200
_FTS_WORD = re.compile(r"[A-Za-z0-9]{2,}")


@dataclass(frozen=True)
class Hit:
    exchange_id: int
    session_id: str
    role: str
    content: str
    created_at: str
    score: float


class VectorIndex:
    """Every turn vector of one model, as a matrix kept in step with the file.

    Up to the embed job's watermark the vectors are contiguous, so a refresh appends just
    the rows past what it holds (one index seek when nothing is new). Vectors stored
    ahead of the watermark (`remember(..., embed=True)`) are few and re-read each time.
    Rows only disappear through dreamd's own forgetting, which bumps `vector_epoch`;
    turns the app deleted are dropped when hits are read.
    """

    def __init__(self, store: Store, model: str) -> None:
        self.store, self.model = store, model
        self._reset(None)

    def _reset(self, epoch: str | None) -> None:
        self.epoch = epoch
        self.upto = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._sessions: list[str] = []
        # Each row's session as a small integer, so a per-user mask is one numpy gather.
        self._names: list[str] = []
        self._code_of: dict[str, int] = {}
        self._codes = np.zeros(0, dtype=np.int32)
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._extra: tuple[np.ndarray, list[str], np.ndarray] | None = None

    def _rows(self, conn: Conn, after: int, upto: int | None
              ) -> tuple[np.ndarray, list[str], np.ndarray] | None:
        rows = q.turn_vector_rows(conn, self.model, after, upto)
        if not rows:
            return None
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return (np.array([r[0] for r in rows], dtype=np.int64), [r[2] for r in rows],
                matrix.reshape(len(rows), -1))

    def refresh(self) -> None:
        with self.store.read() as conn:
            epoch = q.get_state(conn, "vector_epoch", "0")
            if epoch != self.epoch:
                self._reset(epoch)
            watermark = q.embed_watermark(conn, self.model)
            new = self._rows(conn, self.upto, watermark) if watermark > self.upto else None
            self._extra = self._rows(conn, max(watermark, self.upto), None)
        self.upto = max(self.upto, watermark)
        if new is not None:
            ids, sessions, matrix = new
            self._matrix = np.vstack([self._matrix, matrix]) if len(self._ids) else matrix.copy()
            self._ids = np.concatenate([self._ids, ids])
            self._sessions.extend(sessions)
            self._codes = np.concatenate([self._codes, self._encode(sessions)])

    def _encode(self, sessions: list[str]) -> np.ndarray:
        for s in sessions:
            if s not in self._code_of:
                self._code_of[s] = len(self._names)
                self._names.append(s)
        return np.fromiter((self._code_of[s] for s in sessions), dtype=np.int32,
                           count=len(sessions))

    def mask(self, allowed: Callable[[str], bool]) -> np.ndarray:
        """Which rows (in `ids` order) belong to sessions `allowed` accepts: asked once per
        session, not once per row."""
        codes = self._codes if self._extra is None else np.concatenate(
            [self._codes, self._encode(self._extra[1])])
        verdict = np.fromiter((allowed(s) for s in self._names), dtype=bool,
                              count=len(self._names))
        return verdict[codes]

    @property
    def ids(self) -> np.ndarray:
        return self._ids if self._extra is None else np.concatenate([self._ids, self._extra[0]])

    @property
    def sessions(self) -> list[str]:
        return self._sessions if self._extra is None else self._sessions + self._extra[1]

    @property
    def matrix(self) -> np.ndarray:
        if self._extra is None:
            return self._matrix
        return np.vstack([self._matrix, self._extra[2]]) if len(self._ids) else self._extra[2]

    def scores(self, query: np.ndarray) -> np.ndarray:
        query = query.astype(np.float32)
        main = self._matrix @ query if len(self._ids) else np.zeros(0, dtype=np.float32)
        if self._extra is None:
            return main
        return np.concatenate([main, self._extra[2] @ query])


class GistIndex:
    """Gist vectors by session, refreshed by sequence number: a re-summarized session's
    gist gets a new seq in the same transaction as its new vector."""

    def __init__(self, store: Store, model: str, user_id: str) -> None:
        self.store, self.model, self.user_id = store, model, user_id
        self.epoch: str | None = None
        self.seq = 0
        self.vectors: dict[str, np.ndarray] = {}

    def refresh(self) -> None:
        with self.store.read() as conn:
            epoch = q.get_state(conn, "vector_epoch", "0")
            if epoch != self.epoch:  # dreamd deleted gists: start again
                self.epoch, self.seq, self.vectors = epoch, 0, {}
            rows = q.gist_vector_rows(conn, self.model, self.user_id, self.seq)
        for session_id, seq, blob in rows:
            self.vectors[session_id] = np.frombuffer(blob, dtype=np.float32)
            self.seq = max(self.seq, int(seq))

    def best(self, query: np.ndarray, k: int, exclude: str | None) -> list[str]:
        self.refresh()
        keys = [s for s in self.vectors if s != exclude]
        if not keys:
            return []
        scores = np.stack([self.vectors[s] for s in keys]) @ query
        return [keys[i] for i in top_k(scores, k)]


def query_words(text: str) -> list[str]:
    """The query's words for the lexical side, without stopwords (unless that is all)."""
    words = [w.lower() for w in _FTS_WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if w not in STOPWORDS) or dict.fromkeys(words))


def lexical(store: Store, text: str, limit: int) -> dict[int, float]:
    """exchange id -> BM25 relevance (higher is better) for the best `limit` turns."""
    words = query_words(text)
    if not words:
        return {}
    with store.read() as conn:
        return q.search_words(conn, words, limit)


def zscores(values: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return values
    std = float(values.std())
    return (values - values.mean()) / std if std > 1e-9 else np.zeros_like(values)


def fuse(vector: dict[int, float], words: dict[int, float]) -> dict[int, float]:
    """0.65 z(vector) + 0.35 z(BM25) over the union; a missing side counts as its minimum."""
    ids = sorted(set(vector) | set(words))
    if not ids:
        return {}
    v = np.array([vector.get(i, min(vector.values(), default=0.0)) for i in ids])
    w = np.array([words.get(i, min(words.values(), default=0.0)) for i in ids])
    fused = VECTOR_WEIGHT * zscores(v) + (LEXICAL_WEIGHT * zscores(w) if words else 0.0)
    return dict(zip(ids, fused.tolist(), strict=True))


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first."""
    if len(scores) <= k:
        return np.argsort(-scores)
    part = np.argpartition(-scores, k)[:k]
    return part[np.argsort(-scores[part])]

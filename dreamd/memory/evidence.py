"""The consolidated tiers as evidence for the turns they came from.

A gist says what a session was about, and a fact says a turn's news plainly (names
resolved, dates absolute): a question can meet either where it would miss the turns
themselves. Each index is kept per user in step with the file, read by id past what it
holds, and started again when dreamd forgets something (`vector_epoch`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dreamd.store.corrections import word_seq
from dreamd.store.facts import fact_vectors, facts_after, facts_by_id, sources_added
from dreamd.store.interface import Store
from dreamd.store.state import get_state
from dreamd.store.vectors import gist_vector_rows


class LastLook:
    """The store's mark (`Store.changes`) at a reader's last refresh: a refresh with
    nothing committed since reads nothing, where the engine can tell (SQLite)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: object | None = None
        self.now: object | None = None

    def unchanged(self) -> bool:
        self.now = self.store.changes()
        return self.now is not None and self.now == self.seen

    def done(self) -> None:
        """The refresh read all there was at the mark `unchanged` took."""
        self.seen = self.now


@dataclass(frozen=True)
class Evidence:
    """Facts as evidence for one query: per (fact, source turn) pair, in turn order, the
    turn; a pair's cosine with the query is taken only when asked for (`cosine`: pairs,
    as indices into `turns`, or None for every pair), since a recall needs it only for
    the turns that could still rank among the best. No cosine exceeds `bound`."""

    turns: np.ndarray
    cosine: Callable[[np.ndarray | None], np.ndarray]
    bound: float

    @classmethod
    def of(cls, turns: np.ndarray, cosines: np.ndarray) -> Evidence:
        """Cosines already taken (several users' facts joined, in turn order)."""
        return cls(turns, lambda pairs: cosines if pairs is None else cosines[pairs],
                   float(cosines.max()) if len(cosines) else 0.0)


class GistIndex:
    """Gist vectors by session, refreshed by sequence number: a re-summarized session's
    gist gets a new seq in the same transaction as its new vector."""

    def __init__(self, store: Store, space: str, user_id: str) -> None:
        self.store, self.space, self.user_id = store, space, user_id
        self.epoch: str | None = None
        self.seq = 0
        self.vectors: dict[str, np.ndarray] = {}
        self.look = LastLook(store)

    def refresh(self) -> None:
        if self.look.unchanged():
            return
        with self.store.read() as conn:
            epoch = get_state(conn, "vector_epoch", "0")
            if epoch != self.epoch:  # dreamd deleted gists: start again
                self.epoch, self.seq, self.vectors = epoch, 0, {}
            rows = gist_vector_rows(conn, self.space, self.user_id, self.seq)
        for session_id, seq, blob in rows:
            self.vectors[session_id] = np.frombuffer(blob, dtype=np.float32)
            self.seq = max(self.seq, int(seq))
        self.look.done()

    def scores(self, query: np.ndarray) -> dict[str, float]:
        """session -> cos(query, its gist)."""
        self.refresh()
        if not self.vectors:
            return {}
        keys = list(self.vectors)
        values = np.stack([self.vectors[s] for s in keys]) @ query
        return dict(zip(keys, values.tolist(), strict=True))

    def best(self, query: np.ndarray, k: int, exclude: str | None) -> list[str]:
        scores = {s: v for s, v in self.scores(query).items() if s != exclude}
        return sorted(scores, key=lambda s: -scores[s])[:k]


class FactIndex:
    """A user's facts as evidence for the turns they came from: a fact is a turn's news
    said plainly, names resolved and dates absolute, so a question can meet the fact where
    it would miss the turn. Refreshed by fact id, and by source turn for a known fact said
    again; replaced facts stay (they were true)."""

    def __init__(self, store: Store, space: str, user_id: str) -> None:
        self.store, self.space, self.user_id = store, space, user_id
        self.look = LastLook(store)
        self._reset(None)

    def _reset(self, epoch: str | None) -> None:
        self.epoch, self.last_id, self.last_turn = epoch, 0, 0
        self.in_order = True  # fact_of is every row in order: the product needs no gather
        self.waiting: list[int] = []  # facts read before their vector was stored
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.longest = 0.0  # the largest norm of a fact's vector
        self.row_of: dict[int, int] = {}  # fact id -> its row
        self.fact_of = np.zeros(0, dtype=np.int64)  # per (fact, source turn): the fact's row
        self.turns = np.zeros(0, dtype=np.int64)  # and the turn

    def refresh(self) -> None:
        if self.look.unchanged():
            return
        with self.store.read() as conn:
            # dreamd forgot something, or a person withdrew a fact: start again.
            epoch = f'{get_state(conn, "vector_epoch", "0")}/{word_seq(conn, self.user_id)}'
            if epoch != self.epoch:
                self._reset(epoch)
            # Turns that said a known fact again join it (the facts job reads turns in
            # order, so theirs are newer than any source read before).
            again = sources_added(conn, self.user_id, self.last_id, self.last_turn) \
                if self.last_id else []
            # A fact is written before the pass embeds it: one read without a vector
            # waits, and is read again (as it stands then) once its vector is stored.
            blobs = fact_vectors(conn, self.space, self.waiting) if self.waiting else {}
            ready = facts_by_id(conn, list(blobs))
            new = facts_after(conn, self.user_id, self.last_id)
            blobs |= fact_vectors(conn, self.space, [f.id for f in new]) if new else {}
        # (Every pair held has a turn up to last_turn: these are new.)
        pairs = [(self.row_of[f], t) for f, t in again if f in self.row_of]
        kept = [f for f in [*ready, *new] if f.id in blobs and f.sources
                and f.withdrawn is None]
        self.waiting = [i for i in self.waiting if i not in blobs] + \
            [f.id for f in new if f.id not in blobs and f.sources]
        if kept:
            start = len(self.matrix)
            block = np.stack([np.frombuffer(blobs[f.id], dtype=np.float32) for f in kept])
            self.matrix = np.vstack([self.matrix, block]) if start else block
            self.longest = max(self.longest, float(np.linalg.norm(block, axis=1).max()))
            self.row_of.update((f.id, start + n) for n, f in enumerate(kept))
            pairs += [(start + n, t) for n, f in enumerate(kept) for t in f.sources]
        if pairs:
            self.fact_of = np.concatenate([self.fact_of, np.array([r for r, _ in pairs],
                                                                  dtype=np.int64)])
            self.turns = np.concatenate([self.turns, np.array([t for _, t in pairs],
                                                              dtype=np.int64)])
            # In turn order: finding sorted turns among a matrix's rows is ~5x faster.
            order = np.argsort(self.turns, kind="stable")
            self.turns, self.fact_of = self.turns[order], self.fact_of[order]
            self.last_turn = max(self.last_turn, int(self.turns[-1]))
            self.in_order = len(self.fact_of) == len(self.matrix) and bool(
                np.all(self.fact_of == np.arange(len(self.matrix))))
        if new:
            self.last_id = new[-1].id
        self.look.done()

    def evidence(self, query: np.ndarray) -> Evidence:
        """The facts as they stand, for `query`: each pair's cosine is the product of
        the query with its fact's row, taken for the pairs asked for."""
        self.refresh()
        query = query.astype(np.float32)
        matrix, fact_of, in_order = self.matrix, self.fact_of, self.in_order

        def cosine(pairs: np.ndarray | None) -> np.ndarray:
            if pairs is None:
                every: np.ndarray = matrix @ query
                return every if in_order else every[fact_of]
            picked: np.ndarray = matrix[pairs if in_order else fact_of[pairs]] @ query
            return picked

        if not len(self.turns):
            return Evidence.of(self.turns, np.zeros(0, dtype=np.float32))
        return Evidence(self.turns, cosine, self.longest * float(np.linalg.norm(query)))

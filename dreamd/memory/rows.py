"""How a scope's matrix rows lie, laid out once per refresh so a query's passes after the
product are shifts and runs, not a gather through every row's links: the rows whose
neighbours are not beside them, each session's run of rows, the rows facts speak of."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Links:
    """The rows whose neighbours in their session are not the rows just before and after
    them (`rows`), with those neighbours (`prev`, `next`: a row, or -1). A session's rows
    mostly come one after another; where they do not for more than a quarter of the rows
    (sessions taken in turns), every row follows its links (`every`)."""

    rows: np.ndarray
    prev: np.ndarray
    next: np.ndarray
    every: bool

    @classmethod
    def of(cls, prev: np.ndarray, next: np.ndarray) -> Links:
        n = len(prev)
        row = np.arange(n, dtype=np.int64)
        after = np.where(next >= 0, next, n)  # the last row's missing next is a shift away
        rows = np.flatnonzero((prev != row - 1) | (after != row + 1))
        if 4 * len(rows) > n:
            return cls(row, prev, next, True)
        return cls(rows, prev[rows], next[rows], False)

    def sums(self, around: np.ndarray) -> np.ndarray:
        """Per row, the own scores of the rows before and after it in its session, summed
        (`around`: 0, each row's own score, 0)."""
        n = len(around) - 2
        padded = around[1:]  # index -1 (no neighbour) reads the 0 at the end
        score: np.ndarray
        if self.every:
            score = np.take(padded, self.prev)
            score += np.take(padded, self.next)
            return score
        score = np.add(around[:n], around[2:])
        score[self.rows] = np.take(padded, self.prev) + np.take(padded, self.next)
        return score


@dataclass(frozen=True)
class SessionRuns:
    """The rows as runs of one session each: `order` sorts the rows by session (None:
    they already are, one conversation at a time), each run `starts` at a row (of the
    sorted rows), is session `codes` and `lengths` rows long."""

    order: np.ndarray | None
    starts: np.ndarray
    codes: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, codes: np.ndarray) -> SessionRuns:
        grouped = bool(np.all(codes[1:] >= codes[:-1]))
        order = None if grouped else np.argsort(codes, kind="stable")
        ordered = codes if order is None else codes[order]
        starts = np.flatnonzero(np.r_[True, np.diff(ordered) != 0])
        return cls(order, starts, ordered[starts], np.diff(np.r_[starts, len(ordered)]))

    def best(self, score: np.ndarray, sessions: int) -> np.ndarray:
        """The best score in each session (by session code; -inf for one with no row)."""
        best = np.full(sessions, -np.inf, dtype=np.float32)
        best[self.codes] = np.maximum.reduceat(
            score if self.order is None else score[self.order], self.starts)
        return best

    def each_row(self, per_session: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """A value per session code spread to the session's rows (`codes`: each row's)."""
        if self.order is None:  # one run a session: a copy per run
            return np.repeat(per_session[self.codes], self.lengths)
        return np.take(per_session, codes)


@dataclass(frozen=True)
class FactRows:
    """Where facts meet the matrix: the `rows` their turns are (each once, ascending);
    per row the first of its facts (`first`, indices into the facts; None when that is
    every fact, in order: one fact a turn, in turn order); and `more`, per further fact
    a turn gave, which of the rows have one (indices into `rows`) and which fact it is."""

    rows: np.ndarray
    first: np.ndarray | None
    more: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, row_ids: np.ndarray, turns: np.ndarray) -> FactRows:
        """For facts' turn ids (sorted, for speed) among rows of ascending ids."""
        rows = np.searchsorted(row_ids, turns)
        found = rows < len(row_ids)
        found[found] = row_ids[rows[found]] == turns[found]
        picked = np.flatnonzero(found)
        rows = rows[picked]
        if len(rows) and np.any(rows[1:] < rows[:-1]):  # not in turn order after all
            order = np.argsort(rows, kind="stable")
            picked, rows = picked[order], rows[order]
        if not len(rows):
            return cls(rows, picked, [])
        starts = np.flatnonzero(np.r_[True, np.diff(rows) != 0])
        lengths = np.diff(np.r_[starts, len(rows)])
        more = []
        for step in range(1, int(lengths.max())):
            runs = np.flatnonzero(lengths > step)
            more.append((runs, picked[starts[runs] + step]))
        first = picked[starts]
        every = len(first) == len(turns) and bool(np.all(first == np.arange(len(turns))))
        return cls(rows[starts], None if every else first, more)

    def add(self, score: np.ndarray, cosine: Callable[[np.ndarray | None], np.ndarray],
            weight: float, near: np.ndarray | None = None) -> None:
        """Adds to each row `weight` x the best of its facts' cosines (never below 0: a
        fact never counts against its turn). `cosine`: facts (indices), or None for every
        fact, -> their cosines; `near`: per row of the matrix, whether its share is wanted
        (None: every row's). Where over a quarter of the rows are, every cosine is taken in one
        product (gathering that many rows costs more)."""
        picked = None if near is None else np.flatnonzero(near[self.rows])
        if picked is not None and 4 * len(picked) > len(self.rows):
            picked = None
        if picked is None:
            every = cosine(None)
            shares = np.maximum(every if self.first is None else every[self.first], 0)
            for runs, more in self.more:
                shares[runs] = np.maximum(shares[runs], every[more])
            rows = self.rows
        else:
            shares = np.maximum(cosine(picked if self.first is None else self.first[picked]), 0)
            for runs, more in self.more:
                wanted = np.isin(runs, picked, assume_unique=True)
                at = np.searchsorted(picked, runs[wanted])
                shares[at] = np.maximum(shares[at], cosine(more[wanted]))
            rows = self.rows[picked]
        shares *= weight
        score[rows] += shares

"""Recall: the turns most relevant to a query, within the users it may see.

The recipe (measured in RETRIEVAL.md and in `bench.quality`), all without an LLM and
without embedding anything twice:

- every turn is indexed by its key (dreamd.text.keys): date, speaker, addressee, names
  for pronouns, absolute dates for relative ones;
- vector score = cos(query, turn) + cos(query, context), where the context vector is the
  normalized sum of the turn's vector and its session neighbours' — computed from the
  per-turn scores and one stored norm per turn, not a second matrix;
- + 0.5 x the best vector score in the turn's session, or of the session's gist;
- + 0.2 x the best cosine of a fact the turn gave (the facts tier: names resolved, dates
  absolute, so a question can meet the fact where it would miss the turn), taken only
  for a turn that could become a candidate by it;
- words: BM25 over the key with its neighbours (Porter stemming), ranked among the
  allowed users' turns only;
- fused by z-scores (0.65 vector, 0.35 words): reciprocal-rank fusion threw most of the
  lexical gain away;
- + 1.0 for a turn spoken by someone the query names, + 0.5 for one that names them;
- + 1.0 for a turn said within the period the query names ("on 7 July, 2023", "last
  week"), whose best turns are candidates too; first place when the period is all the
  query asks.

Scope comes before ranking: each set of users has its own matrix, holding only their
turns (memory grows with the users a process serves), and the words side ranks only
their turns.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dreamd.memory.evidence import Evidence, FactIndex, GistIndex, LastLook
from dreamd.memory.rows import FactRows, Links, SessionRuns
from dreamd.models import Turn
from dreamd.store.interface import Store
from dreamd.store.state import get_state
from dreamd.store.turns import newest_turn_id
from dreamd.store.vectors import embed_watermark, turn_vector_rows
from dreamd.text.dates import DATE_WORDS, Period, day_of, long_date, periods
from dreamd.text.keys import dated
from dreamd.text.speech import STOPWORDS

VECTOR_WEIGHT, LEXICAL_WEIGHT = 0.65, 0.35
CONTEXT_WEIGHT = 1.0
SESSION_WEIGHT = 0.5
GIST_WEIGHT = 2.0  # a gist is one vector; a turn scores own + context
FACT_WEIGHT = 0.2  # LoCoMo dev, left out in turn: 0.2 won on every pair (0.5, 1.0 hurt)
SPEAKER_BOOST, MENTION_BOOST = 1.0, 0.5
PERIOD_BOOST = 1.0  # LoCoMo dev, left out in turn: 1.0 and 1.5 tie at R@10, 0.5 less
PERIOD_ONLY_BOOST = 100.0  # the period is all the question asks: its turns come first
_SAYING = frozenset("tell told telling say said saying talk talked talking discuss discussed "
                    "chat chatted mention mentioned happen happened happening doing done "
                    "speak spoke share shared up anything something everything".split())
CANDIDATES = 200
INDEXES_KEPT = 16  # scopes whose matrices a process keeps, least recently used dropped
_WORD = re.compile(r"\w{2,}")
_NAME = re.compile(r"\b[A-Z][\w'’-]*\w")
USER_ROLE, AGENT_ROLE = "user", "assistant"  # the roles a chat app gives the two sides
_QUESTION_WORDS = frozenset("what when where which who whom whose why how would could "
                            "should did does do is are was were has have can will".split())


@dataclass(frozen=True)
class Hit:
    exchange_id: int
    session_id: str
    role: str
    content: str
    created_at: str
    score: float

    @property
    def when(self) -> str:
        """The day it was said, unambiguously (`Sunday 7 May 2023`)."""
        day = day_of(self.created_at)
        return long_date(day) if day is not None else self.created_at[:10]

    @property
    def dated(self) -> str:
        """The content with its relative dates made absolute ("yesterday (Saturday …)")."""
        return dated(self.content, self.created_at)


@dataclass(frozen=True)
class Owners:
    """Whose turns a matrix holds: `users` (None: everyone's); with `default_too`, also
    sessions no table has filed under anyone yet."""

    users: tuple[str, ...] | None
    default_too: bool = False


class VectorIndex:
    """The turn vectors of one space and one scope, as a matrix kept in step with the file.

    Up to the embed job's watermark the vectors are contiguous, so a refresh appends just
    the rows past what it holds (one index seek when nothing is new). Vectors stored
    ahead of the watermark (`remember(..., embed=True)`) are few and re-read each time.
    Rows only disappear through dreamd's own forgetting (or a session changing hands),
    which bumps `vector_epoch`; turns the app deleted are dropped when hits are read.
    """

    def __init__(self, store: Store, space: str, scope: Owners = Owners(None)) -> None:
        self.store, self.space, self.scope = store, space, scope
        self.look = LastLook(store)
        self._reset(None)

    def _reset(self, epoch: str | None) -> None:
        self.epoch = epoch
        self.upto = 0
        self.base_ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.sessions: list[str] = []  # the code's name
        self.speakers: list[str] = []
        self._code_of: dict[str, int] = {}
        self._speaker_of: dict[str, int] = {}
        self.codes = np.zeros(0, dtype=np.int32)  # each row's session
        self.spoken_by = np.zeros(0, dtype=np.int32)  # each row's speaker
        self.prev = np.zeros(0, dtype=np.int64)  # the row before in its session, or -1
        self.next = np.zeros(0, dtype=np.int64)
        self.context_norm = np.zeros(0, dtype=np.float32)
        self.days = np.zeros(0, dtype="datetime64[D]")  # the day each row was said
        self._last_of: dict[int, int] = {}  # session code -> its newest row
        self._by_session: SessionRuns | None = None
        self._weights: tuple[np.ndarray, np.ndarray] | None = None
        self._links: Links | None = None  # the rows whose neighbours are not beside them
        self._fact_rows: tuple[np.ndarray, np.ndarray, FactRows] | None = None
        self._extra: list[tuple[int, bytes, str, str, str]] = []

    def _read(self, after: int, upto: int | None) -> list[tuple[int, bytes, str, str, str]]:
        users = list(self.scope.users) if self.scope.users is not None else None
        with self.store.read() as conn:
            return turn_vector_rows(conn, self.space, after, upto, users,
                                      self.scope.default_too)

    def refresh(self) -> None:
        if self.look.unchanged():
            return
        with self.store.read() as conn:
            epoch = get_state(conn, "vector_epoch", "0")
            watermark = embed_watermark(conn, self.space)
            newest = newest_turn_id(conn)
        if epoch != self.epoch:
            self._reset(epoch)
        if watermark > self.upto:
            self._append(self._read(self.upto, watermark))
            self.upto = watermark
        # Rows ahead of the watermark are appended for this query and dropped after.
        self._extra = self._read(self.upto, None) if newest > self.upto else []
        self.look.done()

    def _code(self, table: dict[str, int], names: list[str], name: str) -> int:
        if name not in table:
            table[name] = len(names)
            names.append(name)
        return table[name]

    def _append(self, rows: list[tuple[int, bytes, str, str, str]]) -> None:
        if not rows:
            return
        start = len(self.base_ids)
        block = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        block = block.reshape(len(rows), -1)
        self.matrix = np.vstack([self.matrix, block]) if start else block.copy()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        self.base_ids = np.concatenate([self.base_ids, ids])
        codes = [self._code(self._code_of, self.sessions, r[2]) for r in rows]
        self.codes = np.concatenate([self.codes, np.array(codes, dtype=np.int32)])
        self.spoken_by = np.concatenate([self.spoken_by, np.array(
            [self._code(self._speaker_of, self.speakers, r[3]) for r in rows], dtype=np.int32)])
        self.days = np.concatenate([self.days, days_said(r[4] for r in rows)])
        prev = np.full(len(rows), -1, dtype=np.int64)
        self.next = np.concatenate([self.next, np.full(len(rows), -1, dtype=np.int64)])
        touched = set(range(start, start + len(rows)))
        for offset, code in enumerate(codes):
            row = start + offset
            before = self._last_of.get(code, -1)
            prev[offset] = before
            if before >= 0:
                self.next[before] = row
                touched.add(before)
            self._last_of[code] = row
        self.prev = np.concatenate([self.prev, prev])
        self.context_norm = np.concatenate(
            [self.context_norm, np.ones(len(rows), dtype=np.float32)])
        rows_touched = np.fromiter(sorted(touched), dtype=np.int64, count=len(touched))
        self.context_norm[rows_touched] = self._norms(rows_touched)
        self._by_session = self._weights = self._links = None

    def _norms(self, rows: np.ndarray) -> np.ndarray:
        total = self.matrix[rows].copy()
        for links in (self.prev[rows], self.next[rows]):
            have = links >= 0
            total[have] += self.matrix[links[have]]
        norms = np.linalg.norm(total, axis=1)
        return np.where(norms > 1e-9, norms, 1.0).astype(np.float32)

    def scores(self, query: np.ndarray, gists: dict[str, float] | None = None,
               facts: Evidence | None = None,
               ranked: list[tuple[np.ndarray | None, int]] | None = None) -> np.ndarray:
        """Per row (in `ids` order): own + context score, plus the session signal — the
        best score in the session or its gist's (`gists`: session -> cosine) — plus a
        share of the best cosine of a fact the turn gave (`facts`; see `add_facts` for
        `ranked`).

        The product over the matrix is most of a query's cost: each step after it is a
        pass or two over one score a row, laid out once per refresh (the rows beside a
        row, a session's run of rows, the rows facts speak of), never a gather through
        every row's links where a shift does."""
        query = query.astype(np.float32)
        n = len(self.base_ids)
        # 0, the rows' own scores, 0: a row's neighbours are mostly a shift away
        around = np.empty(n + 2, dtype=np.float32)
        around[0] = around[n + 1] = 0
        own = around[1:n + 1]
        if n:
            np.matmul(self.matrix, query, out=own)
        # own + CONTEXT_WEIGHT * (own + the rows before and after) / their norm
        self_weight, context_weight = self.context_weights()
        score = self.neighbours(around)
        score *= context_weight
        own *= self_weight  # (read no more)
        score += own
        if n:
            best = self.session_best(score)
            for session, cosine in (gists or {}).items():
                code = self._code_of.get(session)
                if code is not None:
                    best[code] = max(best[code], GIST_WEIGHT * cosine)
            best *= SESSION_WEIGHT
            score += self.session_runs().each_row(best, self.codes)
        if self._extra:
            block = np.frombuffer(b"".join(r[1] for r in self._extra), dtype=np.float32)
            score = np.concatenate([score, 2 * (block.reshape(len(self._extra), -1) @ query)])
        if facts is not None:
            self.add_facts(score, facts, ranked)
        result: np.ndarray = score
        return result

    def add_facts(self, score: np.ndarray, facts: Evidence,
                  ranked: list[tuple[np.ndarray | None, int]] | None = None) -> None:
        """Adds to `score` (from `scores`) the facts' share: `facts.turns` in turn order,
        for speed; the same turn ids again are matched to rows once.

        `ranked`: the best-k sets the caller takes from `score` (rows a mask allows, or
        every row; k). A fact adds at most FACT_WEIGHT x its bound, so only a row within
        that of a set's k-th score could enter the set: the others' shares are left out
        (their cosines never taken), and each set is what every share would make it."""
        n = len(self.base_ids)
        if not n or not len(facts.turns):
            return
        near = None
        if ranked is not None:
            # (a hair wider than the bound: a row of a set must not be lost to rounding)
            reach = np.float32(FACT_WEIGHT * max(facts.bound, 0.0) * 1.001 + 1e-6)
            near = np.zeros(n, dtype=bool)
            for allowed, k in ranked:
                among = score if allowed is None else np.where(allowed, score, -np.inf)
                kth = np.partition(among, len(among) - k)[len(among) - k] \
                    if k < len(among) else -np.inf
                near |= (among[:n] >= kth - reach) & np.isfinite(among[:n])
        self.fact_rows(facts.turns).add(score, facts.cosine, FACT_WEIGHT, near)

    def context_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, what its own cosine and its neighbours' weigh in `scores`."""
        if self._weights is None:
            context = np.float32(CONTEXT_WEIGHT) / self.context_norm
            self._weights = (1 + context, context)
        return self._weights

    def neighbours(self, around: np.ndarray) -> np.ndarray:
        if self._links is None:
            self._links = Links.of(self.prev, self.next)
        return self._links.sums(around)

    def session_runs(self) -> SessionRuns:
        if self._by_session is None:
            self._by_session = SessionRuns.of(self.codes)
        return self._by_session

    def session_best(self, score: np.ndarray) -> np.ndarray:
        """The best score in each session (by session code)."""
        return self.session_runs().best(score, len(self.sessions))

    def fact_rows(self, turns: np.ndarray) -> FactRows:
        """Where facts' turn ids (sorted) meet the matrix, kept for the same array of ids
        (a user's facts change by a new one)."""
        kept = self._fact_rows
        if kept is None or kept[0] is not turns or kept[1] is not self.base_ids:
            kept = self._fact_rows = (turns, self.base_ids, FactRows.of(self.base_ids, turns))
        return kept[2]

    @property
    def ids(self) -> np.ndarray:
        if not self._extra:
            return self.base_ids
        extra = np.array([r[0] for r in self._extra], dtype=np.int64)
        return np.concatenate([self.base_ids, extra])

    def within(self, period: Period) -> np.ndarray:
        """Which rows (in `ids` order) were said within `period`."""
        days = np.concatenate([self.days, days_said(r[4] for r in self._extra)])
        if period.every_year:
            month_day = (days.astype("datetime64[M]").astype(np.int64) % 12 + 1) * 100 \
                + (days - days.astype("datetime64[M]")).astype(np.int64) + 1
            first, last = (period.first.month * 100 + period.first.day,
                           period.last.month * 100 + period.last.day)
            result: np.ndarray = (month_day >= first) & (month_day <= last) & ~np.isnat(days)
            return result
        return (days >= np.datetime64(period.first)) & (days <= np.datetime64(period.last))

    def mask(self, allowed: Callable[[str], bool]) -> np.ndarray:
        """Which rows (in `ids` order) belong to sessions `allowed` accepts: asked
        once per session, not once per row."""
        verdict = np.fromiter((allowed(s) for s in self.sessions), dtype=bool,
                              count=len(self.sessions))
        extra = np.fromiter((allowed(r[2]) for r in self._extra), dtype=bool,
                            count=len(self._extra))
        return np.concatenate([verdict[self.codes], extra])


class Indexes:
    """The vector indexes of one Memory, by scope, the least recently used dropped."""

    def __init__(self, store: Store, space: str) -> None:
        self.store, self.space = store, space
        self._kept: OrderedDict[Owners, VectorIndex] = OrderedDict()
        self._gists: dict[str, GistIndex] = {}
        self._facts: dict[str, FactIndex] = {}

    def of(self, scope: Owners) -> VectorIndex:
        index = self._kept.pop(scope, None) or VectorIndex(self.store, self.space, scope)
        self._kept[scope] = index
        while len(self._kept) > INDEXES_KEPT:
            self._kept.popitem(last=False)
        return index

    def gists(self, user: str) -> GistIndex:
        if user not in self._gists:
            self._gists[user] = GistIndex(self.store, self.space, user)
        return self._gists[user]

    def facts(self, user: str) -> FactIndex:
        if user not in self._facts:
            self._facts[user] = FactIndex(self.store, self.space, user)
        return self._facts[user]

    def clear(self) -> None:
        self._kept.clear()
        self._gists.clear()
        self._facts.clear()


def days_said(timestamps: Iterable[str]) -> np.ndarray:
    """The calendar day of each ISO timestamp, as the conversation stored it (NaT where
    it is not a date)."""
    days = []
    for stamp in timestamps:
        day = day_of(stamp)
        days.append(np.datetime64(day) if day is not None else np.datetime64("NaT"))
    return np.array(days, dtype="datetime64[D]")


def query_words(text: str) -> list[str]:
    """The query's words for the lexical side, without stopwords (unless that is all)."""
    words = [w.lower() for w in _WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if w not in STOPWORDS) or dict.fromkeys(words))


def named(text: str) -> list[str]:
    """The people and things a query names: its capitalized words, less question words
    and stopwords ("What did Caroline paint in Malmö?" -> Caroline, Malmö)."""
    names = [re.sub(r"['’]s$", "", w) for w in _NAME.findall(text)]
    names = [w for w in names if w.lower() not in STOPWORDS and w.lower() not in _QUESTION_WORDS]
    return list(dict.fromkeys(names))


def zscores(values: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return values
    std = float(values.std())
    return (values - values.mean()) / std if std > 1e-9 else np.zeros_like(values)


def fuse(vector: dict[int, float], words: dict[int, float],
         spread: tuple[float, float] | None = None,
         late: dict[int, float] | None = None) -> dict[int, float]:
    """0.65 z(vector) + 0.35 z(BM25) over the union; a missing side counts as its minimum.
    `spread` is the mean and deviation of the vector scores over every turn in scope
    (default: over the candidates). `late`: more turns by vector score, ranked as turns
    the words side missed, without moving the minimums or the statistics."""
    ids = sorted(set(vector) | set(words))
    if not ids:
        return {}
    v = np.array([vector.get(i, min(vector.values(), default=0.0)) for i in ids])
    w = np.array([words.get(i, min(words.values(), default=0.0)) for i in ids])
    whole = spread is not None and spread[1] > 1e-9
    zv = (v - spread[0]) / spread[1] if spread is not None and whole else zscores(v)
    zw = zscores(w) if words else np.zeros(len(ids))
    fused = dict(zip(ids, (VECTOR_WEIGHT * zv + LEXICAL_WEIGHT * zw).tolist(), strict=True))
    if late and spread is not None and whole:
        floor = LEXICAL_WEIGHT * float(zw.min())
        for i, score in late.items():
            fused.setdefault(i, VECTOR_WEIGHT * (score - spread[0]) / spread[1] + floor)
    return fused


def boosted(scores: dict[int, float], turns: dict[int, Turn], names: list[str]
            ) -> dict[int, float]:
    """+1.0 for a turn spoken by someone the query names, +0.5 for one that names someone
    or something it names who is not a speaker here (a person who speaks is found by
    their turns; a turn that only addresses them says little about them)."""
    if not names:
        return scores
    lowered = [n.lower() for n in names]
    speakers = {t.role.lower() for t in turns.values()}
    patterns = [re.compile(rf"\b{re.escape(n)}\b", re.IGNORECASE) for n in names
                if n.lower() not in speakers]
    out = dict(scores)
    for i, turn in turns.items():
        if i not in out:
            continue
        if turn.role.lower() in lowered:
            out[i] += SPEAKER_BOOST
        elif any(p.search(turn.content) for p in patterns):
            out[i] += MENTION_BOOST
    return out


def in_period(scores: dict[int, float], turns: dict[int, Turn], period: Period | None,
              question: str) -> dict[int, float]:
    """+1.0 for a turn said within the period the query asks about ("in August 2023",
    "last week"), or that names a day within it ("yesterday" said the day after). When
    the period is all it asks ("What did we talk about last week?"), the period's turns
    come first, best first."""
    if period is None:
        return scores
    boost = PERIOD_BOOST if topic_words(question) else PERIOD_ONLY_BOOST
    out = dict(scores)
    for i, turn in turns.items():
        if i not in out:
            continue
        day = day_of(turn.created_at)
        if (day is not None and period.holds(day)) or any(
                period.meets(p) for p in periods(dated(turn.content, turn.created_at))):
            out[i] += boost
    return out


def topic_words(question: str) -> list[str]:
    """The question's words that say what it is about, not when, nor that something was
    said: "What did I tell you yesterday?" has none."""
    return [w for w in query_words(question) if w not in STOPWORDS and w not in DATE_WORDS
            and w not in _SAYING and w not in _QUESTION_WORDS and not w.isdigit()]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first."""
    if len(scores) <= k:
        return np.argsort(-scores)
    part = np.argpartition(-scores, k)[:k]
    return part[np.argsort(-scores[part])]

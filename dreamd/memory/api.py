"""The library API a chat app uses: remember turns and recall what is relevant.

    from dreamd.memory.api import Memory
    memory = Memory("~/chat/memory.db")
    memory.remember("session-1", "user", "I adopted a dog called Biscuit")
    hits = memory.recall("what is my dog's name?", k=5)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dreamd.backends.protocols import Embedder
from dreamd.config import Config
from dreamd.config import load as load_config
from dreamd.dream.factory import make_embedder, release
from dreamd.dream.word import Word, profile_kept, scrubbed
from dreamd.errors import SessionTaken, UnknownUser
from dreamd.ids import (
    DEFAULT_USER,
    era_key,
    narrative_id,
    profile_id,
    self_state_id,
    session_key,
)
from dreamd.memory import corrections
from dreamd.memory.block_lines import (
    best_era_points,
    gist_shown,
    self_state_lines,
    tier_lines,
    tier_points,
)
from dreamd.memory.context import Context
from dreamd.memory.context import build as build_context
from dreamd.memory.evidence import Evidence
from dreamd.memory.export import export_user
from dreamd.memory.forget import Report as ForgetReport
from dreamd.memory.forget import Scope, forget, parse_before
from dreamd.memory.recall import (
    AGENT_ROLE,
    CANDIDATES,
    USER_ROLE,
    Hit,
    Indexes,
    Owners,
    VectorIndex,
    boosted,
    fuse,
    in_period,
    named,
    query_words,
    top_k,
    topic_words,
)
from dreamd.memory.serial import serialized
from dreamd.memory.steering import Steering
from dreamd.models import Fact
from dreamd.store import facts as facts_sql
from dreamd.store.facts import facts_of
from dreamd.store.interface import Conn, Store
from dreamd.store.opening import open_readonly, open_store
from dreamd.store.state import to_blob
from dreamd.store.tiers import eras_for_user, gist_texts, narrative_row, profile_row, self_state
from dreamd.store.turns import (
    add_session,
    add_turn,
    filed_owner,
    last_turns,
    sessions_of,
    sessions_of_turns,
    turns_by_id,
)
from dreamd.store.vectors import put_turn_vector, search_words, vector_of
from dreamd.text.dates import asked_period
from dreamd.text.from_facts import asks_about_the_past, fact_line
from dreamd.text.keys import Said, in_names, space, vector_key

T = TypeVar("T")


@dataclass(frozen=True)
class NewTurn:
    """One turn as an app hands it over (created_at: now when None)."""

    session_id: str
    role: str
    content: str
    created_at: datetime | None = None
    user: str | None = None  # a new session is filed under this user


class Memory(Steering):
    """One memory file, opened with dreamd's connection contract. Safe to share between
    threads: calls take turns on its one connection (one Memory per thread reads in
    parallel, as WAL allows)."""

    def __init__(self, path: str | Path, *, config: Config | None = None,
                 embedder: Embedder | None = None, create: bool = True,
                 read_only: bool = False, sqlite: str = "system") -> None:
        """`read_only` opens the file without migrating or writing anything (recall,
        context and export work; remember and forget do not).

        `sqlite` is the SQLite library a memory file is opened on: "system" (Python's
        `sqlite3`, which the app's own connections run: two copies of SQLite in one
        process would not see each other's locks) or "bundled" (dreamd's, without the
        WAL-reset bug: for an app that writes only through this Memory, or whose own
        connections run dreamd's library too). See "SQLite's WAL-reset bug" in
        docs/explanation/wal-guest.md."""
        # Without a config, the same one the daemon and the CLI read: $DREAMD_CONFIG,
        # then DREAMD_* variables; `path` names the file.
        self.config = config or load_config(None, db=str(path))
        self._lock = threading.RLock()
        if read_only:
            self.store: Store = open_readonly(self.config, path=path, library=sqlite)
        else:
            self.store = open_store(self.config, create=create, path=path, library=sqlite)
        self._embedder = embedder
        self._made: Embedder | None = None  # what close() releases (not the caller's)
        self._indexes: Indexes | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._made = make_embedder(self.config)
        return self._embedder

    @property
    def indexes(self) -> Indexes:
        if self._indexes is None:
            self._indexes = Indexes(self.store, space(self.embedder.model))
        return self._indexes

    @property
    def index(self) -> VectorIndex:
        """The vector index of the configured user's turns."""
        return self.indexes.of(scope_of([self.config.user.id]))

    @serialized
    def close(self) -> None:
        release(self._made)
        self.store.close()

    @serialized
    def forget(self, user: str, *, session: str | None = None, before: str | None = None,
               dry_run: bool = False, vacuum: bool = False) -> ForgetReport:
        """Erase a user's turns (all, one session, or those made before `before`, a date
        or ISO timestamp) and everything derived from them; see dreamd.memory.forget."""
        scope = Scope(user, session, parse_before(before) if before is not None else None)
        report = forget(self.store, scope, self.config.agent.id, dry_run=dry_run,
                        vacuum=vacuum)
        if not dry_run and self._indexes is not None:
            self._indexes.clear()
        return report

    @serialized
    def export(self, user: str) -> dict[str, Any]:
        """Everything stored about `user` as one JSON-ready document (dreamd.export)."""
        return export_user(self.store, user, self.config.agent.id)

    @serialized
    def remember(self, session_id: str, role: str, content: str, *,
                 created_at: datetime | None = None, embed: bool = False,
                 user: str | None = None) -> int:
        """Add one turn; the daemon embeds it later, or now with `embed=True`. With
        `user`, a new session is filed under that user, and a session of someone else's
        is refused (SessionTaken)."""
        return self._add([NewTurn(session_id, role, content, created_at, user)], embed)[0]

    @serialized
    def remember_all(self, turns: list[NewTurn], *, embed: bool = False) -> list[int]:
        """Add turns in one transaction (all or none), each as `remember` adds one."""
        return self._add(turns, embed)

    def _add(self, turns: list[NewTurn], embed: bool) -> list[int]:
        when = [(t.created_at or datetime.now(UTC)).astimezone(UTC).isoformat() for t in turns]
        vectors: list[bytes | None] = [None] * len(turns)
        if embed:  # before the transaction: the model never runs inside one
            # (whom each turn speaks to is not known yet)
            said = [Said(t.role, t.content, w) for t, w in zip(turns, when, strict=True)]
            vectors = [to_blob(v) for v in self.embedder.embed([vector_key(x) for x in said])]
        ids = []
        with self.store.write(*[session_key(s) for s in {t.session_id for t in turns}]
                              ) as conn:
            owners = {t.session_id: filed_owner(conn, t.session_id) for t in turns}
            for turn in turns:
                if turn.user is not None and owners[turn.session_id] not in (None, turn.user):
                    raise SessionTaken(f"session {turn.session_id!r} belongs to another user, "
                                       f"not {turn.user!r}")
                owners[turn.session_id] = owners[turn.session_id] or turn.user
            for turn, at, vector in zip(turns, when, vectors, strict=True):
                if turn.user is not None:
                    add_session(conn, turn.session_id, None, at, turn.user)
                ids.append(add_turn(conn, turn.session_id, turn.role, turn.content, at))
                if vector is not None:
                    put_turn_vector(conn, space(self.embedder.model), ids[-1], vector)
        return ids

    @serialized
    def recall(self, query: str, *, k: int = 10, session: str | None = None,
               users: list[str] | None = None, words_too: bool = True) -> list[Hit]:
        """The k turns most relevant to `query` among one user's sessions.

        The user is `config.user.id` unless `users` names others (several users' turns mix
        only when the caller asks for it); `session` narrows to one session. Vector
        similarity fused with BM25 (`words_too=False`: vectors alone).
        """
        users = users or [self.config.user.id]
        index = self.indexes.of(scope_of(users))
        index.refresh()
        asked, query, as_named = query, self.as_keyed(query, users), self.as_named(query, users)
        # Turns are keyed by their roles; gists and facts speak of people by name.
        vectors = self.embedder.embed(list(dict.fromkeys([query, as_named])))
        query_vector, named_vector = vectors[0], vectors[-1]
        gists: dict[str, float] = {}
        for user in users:
            gists.update(self.indexes.gists(user).scores(named_vector))
        scores = index.scores(query_vector, gists)
        # The matrix holds these users' turns; the mask narrows to `session` and drops
        # a session that changed hands since the matrix was read.
        allowed = self._allowed(users, session)
        if len(scores):
            scores = np.where(index.mask(allowed), scores, -np.inf)
        period = asked_period(asked, datetime.now(UTC).date())
        within = index.within(period) if period is not None and len(scores) else None
        # The facts' share, where it could move a turn into the candidates (a share is
        # small: far below them, a turn's is never taken).
        index.add_facts(scores, self._evidence(users, named_vector),
                        [(None, CANDIDATES), *([(within, CANDIDATES)] if within is not None
                                               else [])])
        finite = scores[np.isfinite(scores)]
        spread = (float(finite.mean()), float(finite.std())) if len(finite) else None
        best = top_k(scores, CANDIDATES)
        ids = index.ids  # a property: concatenated once, not per candidate
        vector = {int(ids[i]): float(scores[i]) for i in best if np.isfinite(scores[i])}
        words: dict[int, float] = {}
        if words_too and (terms := query_words(query)):
            with self.store.read() as conn:
                words = search_words(conn, terms, CANDIDATES, users, DEFAULT_USER in users)
            words = {i: s for i, s in words.items() if i in self._within(words, allowed)}
        late: dict[int, float] = {}
        if within is not None:
            # The period's best turns are candidates too ("what did I say yesterday?"
            # names no topic).
            inside = np.where(within, scores, -np.inf)
            late = {int(ids[i]): float(scores[i]) for i in top_k(inside, CANDIDATES)
                    if np.isfinite(scores[i])}
        fused = fuse(vector, words, spread, late)
        with self.store.read() as conn:
            turns = turns_by_id(conn, list(fused))
        fused = boosted(fused, turns, named(query))
        fused = in_period(fused, turns, period, asked)
        ranked = sorted((i for i in fused if i in turns), key=lambda i: -fused[i])[:k]
        return [Hit(i, turns[i].session_id, turns[i].role, turns[i].content,
                    turns[i].created_at, fused[i]) for i in ranked]

    def _evidence(self, users: list[str], vector: np.ndarray) -> Evidence:
        """The users' facts as evidence: one user's as the index holds them (the matrix
        matches the same turn ids to its rows once), several users' taken whole and
        joined in turn order."""
        if len(users) == 1:
            return self.indexes.facts(users[0]).evidence(vector)
        parts = [self.indexes.facts(user).evidence(vector) for user in users]
        turns = np.concatenate([p.turns for p in parts])
        cosines = np.concatenate([p.cosine(None) for p in parts])
        order = np.argsort(turns, kind="stable")
        return Evidence.of(turns[order], cosines[order])

    def as_keyed(self, query: str, users: list[str]) -> str:
        """The query in the words turns are keyed in: asked by the one user it is about,
        its "I" and "my" are the role the user's turns carry, its "you" the agent's ("What
        was my previous job?" -> "What was user's previous job?"). Written with the
        user's name instead, it would find turns that greet the user by name."""
        if len(users) != 1:
            return query
        return in_names(query, USER_ROLE, AGENT_ROLE)

    def as_named(self, query: str, users: list[str]) -> str:
        """The query as gists and facts are written: "I" and "my" are the user's name,
        "you" the agent's ("What was my previous job?" -> "What was Sam's previous
        job?")."""
        if len(users) != 1:
            return query
        user = users[0]
        name = self.config.user.name if user == self.config.user.id else user
        return in_names(query, name, self.config.agent.name)

    @serialized
    def context(self, session: str | None = None, *, user: str | None = None,
                query: str | None = None, budget: int = 1000, recent: int = 20,
                raw_turns: bool = True) -> Context:
        """The tiered context block for `session`, within `budget` tokens: the memory of
        the session's own user only (for a session no one has spoken in yet, `user`'s,
        else the default user's). Without a session, the block for `user` (default: the
        configured one) between conversations: no recent turns.

        The query defaults to the session's last user turn. `raw_turns=False` leaves out
        the raw details and recent turns: the consolidated tiers alone.
        """
        agent = self.config.agent.id
        with self.store.read() as conn:
            if session is None:
                user, turns = user or self.config.user.id, []
            else:
                turns = last_turns(conn, session, recent)
                # A new conversation no one said whose: the default user's (a server
                # for many people shows no one's instead: see `whose`).
                user = _whose(conn, session, user, spoken=bool(turns)) or DEFAULT_USER
            agent_state = self_state(conn, agent)
            state = self_state(conn, self_state_id(agent, user))
            profile = profile_row(conn, profile_id(user))
            narrative = narrative_row(conn, narrative_id(user))
            eras = {m: c for m, c, _ in eras_for_user(conn, user)}
            era_vectors = {month: blob for month in eras if (blob := vector_of(
                conn, space(self.embedder.model), "era", era_key(user, month))) is not None}
            facts = facts_of(conn, user)
            fact_vectors = facts_sql.fact_vectors(conn, space(self.embedder.model),
                                          [f.id for f in facts])
            word = corrections.word_of(conn, user, [f for f in facts if f.current])
        if query is None:
            query = next((c for r, c, _ in reversed(turns) if r == USER_ROLE), "")
        vector = self.embedder.embed([self.as_named(query, [user]) or " "])[0]
        parts: dict[str, list[str]] = {
            "self": self_state_lines({**(state[0] if state else {}),
                                 "drives": (agent_state[0] if agent_state else {}).get("drives")}),
            # A person's word holds from the moment it is given, before a pass rebuilds.
            "profile": tier_lines(profile_kept(profile.content if profile else "", word)),
            "narrative": tier_points(scrubbed(narrative.content if narrative else "", word)),
            "eras": best_era_points({m: scrubbed(c, word) for m, c in eras.items()}, era_vectors,
                               vector, 2),
            "facts": relevant_facts(facts, fact_vectors, vector, query or "", FACTS),
            "gists": self._gist_lines(vector, session, user, word, query or ""),
            # Best first; as many as the budget takes (the tier's share, and what the
            # tiers before it left over).
            "details": [line for h in self.recall(query, k=DETAILS + 5, users=[user])
                        if h.session_id != session and (line := scrubbed(
                            f"[{h.when}] {h.role}: {h.dated}", word, h.created_at))
                        ][:DETAILS] if query else [],
            "recent": [line for r, c, at in turns
                       if (line := scrubbed(f"{r}: {c}", word, at))],
        }
        if not raw_turns:  # the consolidated tiers alone
            parts["details"], parts["recent"] = [], []
        return build_context(parts, budget)

    def whose(self, session: str, user: str | None = None) -> str | None:
        """Whose `session` is: as filed, else (once it has turns) the default user's, else
        `user`'s, the one asking for a new conversation; None when no one said."""
        with self.store.read() as conn:
            return _whose(conn, session, user, spoken=bool(last_turns(conn, session, 1)))

    def _gist_lines(self, vector: np.ndarray, session: str | None, user: str,
                    word: Word, query: str) -> list[str]:
        best = self.indexes.gists(user).best(vector, 3, exclude=session)
        if not best:
            return []
        with self.store.read() as conn:
            rows = gist_texts(conn, best)
        asked = topic_words(query)
        return [gist_shown(tier_lines(scrubbed(rows[s], word)), asked) for s in best if s in rows]

    def _allowed(self, users: list[str], session: str | None) -> Callable[[str], bool]:
        """Whether a session's turns may be returned: it belongs to one of `users` (a
        session no table has heard of yet belongs to the default user)."""
        with self.store.read() as conn:
            if DEFAULT_USER in users:
                others = sessions_of(conn, users, others=True)
                mine = sessions_of(conn, users)
                return lambda s: (session is None or s == session) and (
                    s in mine or s not in others)
            mine = sessions_of(conn, users)
        return lambda s: (session is None or s == session) and s in mine

    def _within(self, ids: dict[int, float], allowed: Callable[[str], bool]) -> set[int]:
        with self.store.read() as conn:
            rows = sessions_of_turns(conn, list(ids))
        return {i for i, session in rows if allowed(session)}


def _whose(conn: Conn, session: str, asked: str | None, *, spoken: bool) -> str | None:
    """A session's user: as filed; else, once it has turns, the default user's (an app
    that files no users); else it is a new conversation, and the asker's, if one asked.
    Never the default user's memory for a conversation no one has filed or spoken in."""
    owner = filed_owner(conn, session) or (DEFAULT_USER if spoken else None)
    if owner is not None and asked is not None and asked != owner:
        raise UnknownUser(f"user {asked!r} has no session {session!r}")
    return owner or asked


DETAILS = 25  # raw turns offered to the context block's details tier
FACTS = 12  # facts offered to its facts tier


def relevant_facts(facts: list[Fact], vectors: dict[int, bytes], query: np.ndarray,
                   text: str, k: int) -> list[str]:
    """The facts nearest the query, as lines with their dates: current ones, and the ones
    they replaced only when the query asks about the past."""
    shown = [f for f in facts if f.current or asks_about_the_past(text)]
    scored = [f for f in shown if f.id in vectors]
    if not scored:
        return []
    scores = np.stack([np.frombuffer(vectors[f.id], dtype=np.float32) for f in scored]) @ query
    return [fact_line(scored[i]) for i in top_k(scores, k)]


def scope_of(users: list[str]) -> Owners:
    """The matrix for these users (a session nobody has filed yet is the default user's)."""
    return Owners(tuple(sorted(set(users))), DEFAULT_USER in users)

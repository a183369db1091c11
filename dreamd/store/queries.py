"""The SQL dreamd runs: small named functions, one statement each where possible."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from dreamd.ids import (
    DEFAULT_USER,
    era_key,
    narrative_id,
    profile_id,
    self_state_id,
    split_era_key,
)
from dreamd.models import Gist, Turn
from dreamd.store.connect import Store

# ---------------------------------------------------------------- small helpers


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def get_state(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM dreamd_state WHERE key = ?", (key,)).fetchone()
    return row[0] if row else default


def set_state(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO dreamd_state (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def next_seq(conn: sqlite3.Connection) -> int:
    """A monotonic counter for derived rows; call inside a write transaction."""
    seq = int(get_state(conn, "seq", "0") or 0) + 1
    set_state(conn, "seq", str(seq))
    return seq


@dataclass(frozen=True)
class Layout:
    """What the core tables of this file require (an adopted file may differ)."""

    summaries_embedding_required: bool
    eras_embedding_required: bool


def read_layout(store: Store) -> Layout:
    def required(table: str, column: str) -> bool:
        rows = store.conn.execute(f"PRAGMA table_info({table})").fetchall()
        return any(r[1] == column and r[3] for r in rows)

    return Layout(required("summaries", "embedding"), required("eras", "embedding"))


def core_embedding(required: bool) -> bytes | None:
    """What dreamd writes into a core table's embedding column.

    dreamd's vectors live in dreamd_vectors per model; the core column keeps the app's
    model. Where the prior-art layout makes it NOT NULL, an empty blob marks "no vector
    of the app's model" rather than a vector of another dimension.
    """
    return b"" if required else None


# ---------------------------------------------------------------- tally


def tally_watermark(conn: sqlite3.Connection) -> int:
    return int(get_state(conn, "tally_id", "0") or 0)


def new_exchange_groups(
    conn: sqlite3.Connection, after_id: int, upto_id: int
) -> list[tuple[Any, ...]]:
    """Per-session counts of exchanges with after_id < id <= upto_id (a rowid range scan)."""
    return conn.execute(
        "SELECT e.session_id, COALESCE(MAX(s.user_id), ?), COUNT(*), MIN(e.id), MAX(e.id), "
        "MIN(e.created_at), MAX(e.created_at) "
        "FROM exchanges e LEFT JOIN sessions s ON s.id = e.session_id "
        "WHERE e.id > ? AND e.id <= ? GROUP BY e.session_id",
        (DEFAULT_USER, after_id, upto_id),
    ).fetchall()


def iso_utc(text: str) -> str:
    """A timestamp as ISO-8601 UTC text, so that the tally's times compare as strings.

    The app's text may end in Z, use a space, or carry no zone (taken as UTC); text that
    is no timestamp at all is kept as it is.
    """
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def apply_tally(
    conn: sqlite3.Connection, groups: list[tuple[Any, ...]], upto_id: int
) -> None:
    for session_id, user_id, turns, first_id, last_id, raw_first, raw_last in groups:
        first_at, last_at = iso_utc(raw_first), iso_utc(raw_last)
        conn.execute(
            "INSERT INTO dreamd_sessions (session_id, user_id, turns, first_id, last_id, "
            "first_at, last_at, month, summarized_id, summarized_turns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, substr(?, 1, 7), "
            "COALESCE((SELECT last_exchange_id FROM summaries WHERE session_id = ?), 0), "
            # An adopted gist: count the turns it already covers (index range, once).
            "(SELECT COUNT(*) FROM exchanges x WHERE x.session_id = ? AND x.id <= "
            "COALESCE((SELECT last_exchange_id FROM summaries WHERE session_id = ?), 0))) "
            "ON CONFLICT(session_id) DO UPDATE SET turns = turns + excluded.turns, "
            "last_id = MAX(last_id, excluded.last_id), last_at = MAX(last_at, excluded.last_at)",
            (session_id, user_id, turns, first_id, last_id, first_at, last_at, first_at,
             session_id, session_id, session_id),
        )
    set_state(conn, "tally_id", str(upto_id))


@dataclass(frozen=True)
class TallyRow:
    turns: int
    summarized_turns: int
    summarized_id: int
    last_at: str


def tally_rows(conn: sqlite3.Connection, session_ids: list[str], chunk: int = 500
               ) -> dict[str, TallyRow]:
    """The tally of these sessions (those it has), by primary key."""
    out: dict[str, TallyRow] = {}
    for start in range(0, len(session_ids), chunk):
        part = session_ids[start : start + chunk]
        rows = conn.execute(
            "SELECT session_id, turns, summarized_turns, summarized_id, last_at FROM "
            f"dreamd_sessions WHERE session_id IN ({','.join('?' * len(part))})", part)
        out.update({r[0]: TallyRow(*r[1:]) for r in rows})
    return out


def raw_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """Turns and sessions in the app's own table, before dreamd has a tally (one scan)."""
    row = conn.execute("SELECT COUNT(*), COUNT(DISTINCT session_id) FROM exchanges").fetchone()
    return int(row[0]), int(row[1])


def max_exchange_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM exchanges").fetchone()[0])


def count_exchanges_after(conn: sqlite3.Connection, after_id: int,
                          upto_id: int | None = None) -> int:
    """Turns with after_id < id (<= upto_id, when given)."""
    if upto_id is None:
        row = conn.execute("SELECT COUNT(*) FROM exchanges WHERE id > ?", (after_id,)).fetchone()
    else:
        row = conn.execute("SELECT COUNT(*) FROM exchanges WHERE id > ? AND id <= ?",
                           (after_id, upto_id)).fetchone()
    return int(row[0])


# ---------------------------------------------------------------- sessions and turns


@dataclass(frozen=True)
class DirtySession:
    session_id: str
    user_id: str
    turns: int
    last_id: int
    last_at: str
    month: str
    summarized_id: int
    summarized_turns: int

    @property
    def unsummarized(self) -> int:
        return self.turns - self.summarized_turns


def dirty_sessions(conn: sqlite3.Connection) -> list[DirtySession]:
    """Every user's sessions with turns past their gist, through the partial index."""
    rows = conn.execute(
        "SELECT session_id, user_id, turns, last_id, last_at, month, summarized_id, "
        "summarized_turns FROM dreamd_sessions "
        "WHERE last_id > summarized_id ORDER BY last_at"
    ).fetchall()
    return [DirtySession(*r) for r in rows]


@dataclass(frozen=True)
class DirtyTotals:
    dirty: int
    unsummarized: int
    ripe: int
    idle_ripe: int
    idle_ripe_turns: int


def dirty_totals(conn: sqlite3.Connection, ripe_after: int, idle_before: str) -> DirtyTotals:
    """Sensing's view of the dirty sessions of every user, aggregated over the partial index."""
    row = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(turns - summarized_turns), 0), "
        "COALESCE(SUM(ripe), 0), COALESCE(SUM(ripe AND last_at <= ?), 0), "
        "COALESCE(SUM(CASE WHEN ripe AND last_at <= ? THEN turns - summarized_turns END), 0) "
        "FROM (SELECT turns, summarized_turns, last_at, "
        "(summarized_id = 0 OR turns - summarized_turns >= ?) AS ripe FROM dreamd_sessions "
        "WHERE last_id > summarized_id)",
        (idle_before, idle_before, ripe_after),
    ).fetchone()
    return DirtyTotals(*(int(v) for v in row))


def count_sessions(conn: sqlite3.Connection, user_id: str | None = None) -> int:
    """Sessions in the tally: one user's, or everyone's."""
    if user_id is None:
        return int(conn.execute("SELECT COUNT(*) FROM dreamd_sessions").fetchone()[0])
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM dreamd_sessions WHERE user_id = ?", (user_id,)
        ).fetchone()[0]
    )


def known_users(conn: sqlite3.Connection) -> list[str]:
    """Users the file knows: named by the app's sessions rows or filed by the tally."""
    rows = conn.execute("SELECT user_id FROM sessions WHERE user_id IS NOT NULL UNION "
                        "SELECT user_id FROM dreamd_sessions ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


@dataclass(frozen=True)
class SessionCount:
    session_id: str
    user_id: str
    turns: int
    unsummarized: int
    last_at: str | None


def session_counts(conn: sqlite3.Connection, user_id: str | None = None
                   ) -> list[SessionCount]:
    """Each session with its turns and backlog as of the last pass's tally (sessions the
    app created that have no turns yet show 0)."""
    rows = conn.execute(
        "SELECT session_id, user_id, turns, turns - summarized_turns, last_at "
        "FROM dreamd_sessions WHERE ?1 IS NULL OR user_id = ?1 UNION ALL "
        "SELECT id, COALESCE(user_id, ?2), 0, 0, NULL FROM sessions s "
        "WHERE (?1 IS NULL OR COALESCE(user_id, ?2) = ?1) AND NOT EXISTS "
        "(SELECT 1 FROM dreamd_sessions t WHERE t.session_id = s.id) "
        "ORDER BY 2, 5 DESC", (user_id, DEFAULT_USER)).fetchall()
    return [SessionCount(*r) for r in rows]


def session_owner(conn: sqlite3.Connection, session_id: str) -> str:
    """Whose session this is: its sessions row, else the tally, else the default user."""
    row = conn.execute(
        "SELECT COALESCE((SELECT user_id FROM sessions WHERE id = ?1), "
        "(SELECT user_id FROM dreamd_sessions WHERE session_id = ?1), ?2)",
        (session_id, DEFAULT_USER),
    ).fetchone()
    return str(row[0])


def sessions_of(conn: sqlite3.Connection, users: list[str], *, others: bool = False
                ) -> set[str]:
    """Sessions known to belong to these users (or, with `others`, to anyone else)."""
    marks = ",".join("?" * len(users))
    op = "NOT IN" if others else "IN"
    rows = conn.execute(
        f"SELECT id FROM sessions WHERE user_id {op} ({marks}) UNION "
        f"SELECT session_id FROM dreamd_sessions WHERE user_id {op} ({marks})",
        (*users, *users)).fetchall()
    return {r[0] for r in rows}


def session_turns(
    conn: sqlite3.Connection, session_id: str, after_id: int, upto_id: int
) -> list[Turn]:
    rows = conn.execute(
        "SELECT id, session_id, role, content, created_at FROM exchanges "
        "WHERE session_id = ? AND id > ? AND id <= ? ORDER BY id",
        (session_id, after_id, upto_id),
    ).fetchall()
    return [Turn(*r) for r in rows]


def summary_row(conn: sqlite3.Connection, session_id: str) -> tuple[str, int] | None:
    row = conn.execute(
        "SELECT content, last_exchange_id FROM summaries WHERE session_id = ?", (session_id,)
    ).fetchone()
    return (row[0], int(row[1])) if row else None


def save_gist(
    conn: sqlite3.Connection,
    *,
    session: DirtySession,
    content: str,
    last_exchange_id: int,
    turns_covered: int,
    source: str,
    created_at: str,
    embedding: bytes | None,
    vector: bytes | None,
    model: str,
) -> bool:
    """Store a gist if the session's watermark is still what the job read. Returns stored.

    The watermark check and its move are one UPDATE: the write lock is held for as few
    statements as possible, because the chat app waits behind it.
    """
    moved = conn.execute(
        "UPDATE dreamd_sessions SET summarized_id = ?, summarized_turns = ? "
        "WHERE session_id = ? AND summarized_id = ?",
        (last_exchange_id, turns_covered, session.session_id, session.summarized_id),
    ).rowcount
    if not moved:
        return False
    seq = next_seq(conn)
    conn.execute(
        "INSERT INTO summaries (session_id, content, embedding, last_exchange_id, created_at, "
        "user_id, dreamd_seq, dreamd_month, dreamd_turns, dreamd_source) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
        "content = excluded.content, embedding = excluded.embedding, "
        "last_exchange_id = excluded.last_exchange_id, created_at = excluded.created_at, "
        "user_id = excluded.user_id, dreamd_seq = excluded.dreamd_seq, "
        "dreamd_month = excluded.dreamd_month, dreamd_turns = excluded.dreamd_turns, "
        "dreamd_source = excluded.dreamd_source",
        (session.session_id, content, embedding, last_exchange_id, created_at, session.user_id,
         seq, session.month, turns_covered, source),
    )
    if vector is not None:
        put_vector(conn, model, "summary", session.session_id, vector)
    return True


def put_vector(conn: sqlite3.Connection, model: str, kind: str, key: str, vector: bytes) -> None:
    conn.execute(
        "INSERT INTO dreamd_vectors (model, kind, key, vector) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(model, kind, key) DO UPDATE SET vector = excluded.vector",
        (model, kind, key, vector),
    )


# ---------------------------------------------------------------- embeddings


def embed_watermark(conn: sqlite3.Connection, model: str) -> int:
    row = conn.execute(
        "SELECT last_exchange_id FROM dreamd_embed_state WHERE model = ?", (model,)
    ).fetchone()
    return int(row[0]) if row else 0


def turns_after(conn: sqlite3.Connection, after_id: int, limit: int, upto_id: int
                ) -> list[Turn]:
    """Up to `limit` turns with after_id < id <= upto_id, in id order."""
    rows = conn.execute(
        "SELECT id, session_id, role, content, created_at FROM exchanges "
        "WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (after_id, upto_id, limit),
    ).fetchall()
    return [Turn(*r) for r in rows]


def save_turn_vectors(
    conn: sqlite3.Connection,
    model: str,
    dim: int,
    expected_watermark: int,
    rows: list[tuple[int, bytes]],
    new_watermark: int,
) -> bool:
    if embed_watermark(conn, model) != expected_watermark:
        return False
    conn.executemany(
        "INSERT OR REPLACE INTO dreamd_exchange_vectors (model, exchange_id, vector) "
        "VALUES (?, ?, ?)",
        [(model, exchange_id, blob) for exchange_id, blob in rows],
    )
    conn.execute(
        "INSERT INTO dreamd_embed_state (model, dim, last_exchange_id) VALUES (?, ?, ?) "
        "ON CONFLICT(model) DO UPDATE SET dim = excluded.dim, "
        "last_exchange_id = excluded.last_exchange_id",
        (model, dim, new_watermark),
    )
    return True


def derived_without_vector(
    conn: sqlite3.Connection, model: str, limit: int
) -> list[tuple[str, str, str]]:
    """(kind, key, content) of gists and eras that have no vector of `model` yet."""
    rows = conn.execute(
        "SELECT 'summary', session_id, content FROM summaries s WHERE NOT EXISTS "
        "(SELECT 1 FROM dreamd_vectors v WHERE v.model = ?1 AND v.kind = 'summary' "
        "AND v.key = s.session_id) "
        "UNION ALL SELECT 'era', user_id || '|' || month, content FROM eras e WHERE NOT EXISTS "
        "(SELECT 1 FROM dreamd_vectors v WHERE v.model = ?1 AND v.kind = 'era' "
        "AND v.key = e.user_id || '|' || e.month) LIMIT ?2",
        (model, limit),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def save_derived_vectors(
    conn: sqlite3.Connection, model: str, rows: list[tuple[str, str, str, bytes]]
) -> int:
    """Store vectors for derived rows whose content is still what was embedded."""
    stored = 0
    for kind, key, content, blob in rows:
        if kind == "summary":
            current = conn.execute(
                "SELECT content FROM summaries WHERE session_id = ?", (key,)).fetchone()
        else:
            current = conn.execute("SELECT content FROM eras WHERE user_id = ? AND month = ?",
                                   split_era_key(key)).fetchone()
        if current and current[0] == content:
            put_vector(conn, model, kind, key, blob)
            stored += 1
    return stored


def fts_watermark(conn: sqlite3.Connection) -> int:
    return int(get_state(conn, "fts_id", "0") or 0)


def index_text(conn: sqlite3.Connection, after_id: int, upto_id: int) -> None:
    """Add turns after_id < id <= upto_id to the full-text index and move its mark."""
    conn.execute(
        "INSERT INTO dreamd_fts (rowid, text) SELECT id, role || ': ' || content "
        "FROM exchanges WHERE id > ? AND id <= ?",
        (after_id, upto_id),
    )
    set_state(conn, "fts_id", str(upto_id))


def turn_vectors(conn: sqlite3.Connection, model: str, ids: list[int]) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for exchange_id, blob in conn.execute(
            f"SELECT exchange_id, vector FROM dreamd_exchange_vectors "
            f"WHERE model = ? AND exchange_id IN ({marks})",
            (model, *chunk),
        ):
            out[int(exchange_id)] = from_blob(blob)
    return out


# ---------------------------------------------------------------- gists and tiers


def gists_for_user(conn: sqlite3.Connection, user_id: str) -> list[Gist]:
    rows = conn.execute(
        "SELECT session_id, content, last_exchange_id, COALESCE(dreamd_month, ''), dreamd_seq "
        "FROM summaries WHERE user_id = ? ORDER BY dreamd_month, last_exchange_id",
        (user_id,),
    ).fetchall()
    return [Gist(*r) for r in rows]


def gists_for_month(conn: sqlite3.Connection, user_id: str, month: str) -> list[Gist]:
    rows = conn.execute(
        "SELECT session_id, content, last_exchange_id, dreamd_month, dreamd_seq "
        "FROM summaries WHERE user_id = ? AND dreamd_month = ? ORDER BY last_exchange_id",
        (user_id, month),
    ).fetchall()
    return [Gist(*r) for r in rows]


def max_gist_seq(conn: sqlite3.Connection, user_id: str | None) -> int:
    """The newest gist's seq: one user's, or (user_id None) anyone's."""
    if user_id is None:
        return int(conn.execute(
            "SELECT COALESCE(MAX(dreamd_seq), 0) FROM summaries").fetchone()[0])
    row = conn.execute(
        "SELECT COALESCE(MAX(dreamd_seq), 0) FROM summaries WHERE user_id = ?", (user_id,)
    ).fetchone()
    return int(row[0])


def count_gists(conn: sqlite3.Connection, user_id: str | None = None) -> int:
    if user_id is None:
        return int(conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])
    return int(
        conn.execute("SELECT COUNT(*) FROM summaries WHERE user_id = ?", (user_id,)).fetchone()[0]
    )


def count_gists_after(conn: sqlite3.Connection, user_id: str | None, seq: int) -> int:
    """Gists newer than `seq`: one user's, or (user_id None) everyone's."""
    if user_id is None:
        return int(conn.execute(
            "SELECT COUNT(*) FROM summaries WHERE dreamd_seq > ?", (seq,)).fetchone()[0])
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM summaries WHERE user_id = ? AND dreamd_seq > ?", (user_id, seq)
        ).fetchone()[0]
    )


def users_with_gists(conn: sqlite3.Connection) -> list[str]:
    """Every user who has a gist, by a skip-scan of the (user, seq) index: one seek each."""
    rows = conn.execute(
        "WITH RECURSIVE u(id) AS (SELECT MIN(user_id) FROM summaries "
        "UNION ALL SELECT (SELECT MIN(user_id) FROM summaries WHERE user_id > u.id) "
        "FROM u WHERE u.id IS NOT NULL) SELECT id FROM u WHERE id IS NOT NULL"
    ).fetchall()
    return [r[0] for r in rows]


def users_with_turns_after(conn: sqlite3.Connection, after_id: int) -> list[str]:
    """Users with a session that has a turn newer than `after_id`."""
    rows = conn.execute(
        "SELECT DISTINCT user_id FROM dreamd_sessions WHERE last_id > ? ORDER BY user_id",
        (after_id,),
    ).fetchall()
    return [r[0] for r in rows]


def inputs_of(gists: list[Gist], previous: dict[str, int] | None = None) -> dict[str, int]:
    """Provenance of a tier: session -> the last turn of it that the tier was built from."""
    out = dict(previous or {})
    for g in gists:
        out[g.session_id] = max(out.get(g.session_id, 0), g.last_exchange_id)
    return out


def tier_inputs(conn: sqlite3.Connection, table: str, where: str, args: tuple[Any, ...]
                ) -> dict[str, int]:
    row = conn.execute(f"SELECT dreamd_inputs FROM {table} WHERE {where}", args).fetchone()
    try:
        data = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        data = {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def month_gist_seqs(conn: sqlite3.Connection, user_id: str) -> dict[str, int]:
    """month -> newest gist seq, by a skip-scan of the (user, month, seq) index.

    One index seek per month instead of a pass over every gist: sensing stays cheap when a
    user has tens of thousands of sessions.
    """
    rows = conn.execute(
        "WITH RECURSIVE m(month) AS ("
        " SELECT MIN(dreamd_month) FROM summaries WHERE user_id = ?1 AND dreamd_month IS NOT NULL"
        " UNION ALL SELECT (SELECT MIN(dreamd_month) FROM summaries"
        "  WHERE user_id = ?1 AND dreamd_month > m.month) FROM m WHERE m.month IS NOT NULL) "
        "SELECT month, (SELECT MAX(dreamd_seq) FROM summaries WHERE user_id = ?1 "
        "AND dreamd_month = m.month) FROM m WHERE month IS NOT NULL",
        (user_id,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def era_seqs(conn: sqlite3.Connection, user_id: str) -> dict[str, int]:
    """month -> the newest gist seq the era was built from."""
    rows = conn.execute("SELECT month, dreamd_seq FROM eras WHERE user_id = ?", (user_id,))
    return {r[0]: int(r[1]) for r in rows}


def stale_months(conn: sqlite3.Connection, user_id: str) -> list[str]:
    """Months with a gist newer than their era, or with no era yet."""
    eras = era_seqs(conn, user_id)
    return sorted(m for m, seq in month_gist_seqs(conn, user_id).items() if eras.get(m, -1) < seq)


@dataclass(frozen=True)
class Tier:
    """A single-row tier (profile or narrative) as dreamd sees it."""

    content: str
    seq: int
    updated_at: str
    source: str | None


def profile_row(conn: sqlite3.Connection, profile_id: str) -> Tier | None:
    row = conn.execute(
        "SELECT content, dreamd_seq, updated_at, dreamd_source FROM profile WHERE id = ?",
        (profile_id,),
    ).fetchone()
    return Tier(row[0], int(row[1]), row[2], row[3]) if row else None


def save_profile(
    conn: sqlite3.Connection, *, profile_id: str, user_id: str, content: str,
    sessions_covered: int, seq: int, expected_seq: int | None, source: str, now: str,
    inputs: dict[str, int],
) -> bool:
    current = profile_row(conn, profile_id)
    if (current.seq if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO profile (id, content, sessions_covered, updated_at, user_id, dreamd_seq, "
        "dreamd_source, dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
        "SET content = excluded.content, sessions_covered = excluded.sessions_covered, "
        "updated_at = excluded.updated_at, user_id = excluded.user_id, "
        "dreamd_seq = excluded.dreamd_seq, dreamd_source = excluded.dreamd_source, "
        "dreamd_inputs = excluded.dreamd_inputs",
        (profile_id, content, sessions_covered, now, user_id, seq, source,
         json.dumps(inputs, sort_keys=True)),
    )
    return True


def tier_sources(conn: sqlite3.Connection, user_id: str, profile_id: str, narrative_id: str
                 ) -> dict[tuple[str, str], str]:
    """Which backend made each of a user's tiers: ("gist", session), ("era", month),
    ("profile", id), ("narrative", id) -> e.g. "extractive:…" or "llm:gpt-4o-mini"."""
    rows = conn.execute(
        "SELECT 'gist', session_id, dreamd_source FROM summaries WHERE user_id = ?1 "
        "AND dreamd_source IS NOT NULL UNION ALL SELECT 'era', month, dreamd_source FROM "
        "eras WHERE user_id = ?1 AND dreamd_source IS NOT NULL UNION ALL "
        "SELECT 'profile', id, dreamd_source FROM profile WHERE id = ?2 UNION ALL "
        "SELECT 'narrative', id, dreamd_source FROM narrative WHERE id = ?3",
        (user_id, profile_id, narrative_id)).fetchall()
    return {(kind, key): source for kind, key, source in rows}


def eras_for_user(conn: sqlite3.Connection, user_id: str) -> list[tuple[str, str, int]]:
    """(month, content, seq) for every era, oldest first."""
    rows = conn.execute(
        "SELECT month, content, dreamd_seq FROM eras WHERE user_id = ? ORDER BY month",
        (user_id,),
    ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def save_era(
    conn: sqlite3.Connection, *, month: str, user_id: str, content: str, session_count: int,
    seq: int, expected_seq: int | None, source: str, now: str, embedding: bytes | None,
    vector: bytes | None, model: str, inputs: dict[str, int],
) -> bool:
    current = conn.execute("SELECT dreamd_seq FROM eras WHERE user_id = ? AND month = ?",
                           (user_id, month)).fetchone()
    if (int(current[0]) if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO eras (month, content, embedding, session_count, created_at, user_id, "
        "dreamd_seq, dreamd_source, dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(user_id, month) DO UPDATE "
        "SET content = excluded.content, embedding = excluded.embedding, "
        "session_count = excluded.session_count, created_at = excluded.created_at, "
        "dreamd_seq = excluded.dreamd_seq, dreamd_source = excluded.dreamd_source, "
        "dreamd_inputs = excluded.dreamd_inputs",
        (month, content, embedding, session_count, now, user_id, seq, source,
         json.dumps(inputs, sort_keys=True)),
    )
    if vector is not None:
        put_vector(conn, model, "era", era_key(user_id, month), vector)
    return True


def narrative_row(conn: sqlite3.Connection, narrative_id: str) -> Tier | None:
    row = conn.execute(
        "SELECT content, dreamd_seq, updated_at, dreamd_source FROM narrative WHERE id = ?",
        (narrative_id,),
    ).fetchone()
    return Tier(row[0], int(row[1]), row[2], row[3]) if row else None


def save_narrative(
    conn: sqlite3.Connection, *, narrative_id: str, user_id: str, content: str, seq: int,
    expected_seq: int | None, source: str, now: str, inputs: dict[str, int],
) -> bool:
    current = narrative_row(conn, narrative_id)
    if (current.seq if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO narrative (id, content, updated_at, user_id, dreamd_seq, dreamd_source, "
        "dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
        "content = excluded.content, updated_at = excluded.updated_at, "
        "user_id = excluded.user_id, dreamd_seq = excluded.dreamd_seq, "
        "dreamd_source = excluded.dreamd_source, dreamd_inputs = excluded.dreamd_inputs",
        (narrative_id, content, now, user_id, seq, source, json.dumps(inputs, sort_keys=True)),
    )
    return True


def gists_past_profile(conn: sqlite3.Connection, user_id: str) -> int:
    """How many of the user's gists are newer than their profile (all, with none yet)."""
    current = profile_row(conn, profile_id(user_id))
    return count_gists_after(conn, user_id, current.seq if current else 0)


def narrative_stale(conn: sqlite3.Connection, user_id: str) -> bool:
    """Whether the user's profile or eras moved past their narrative."""
    inputs_seq = max_tier_seq(conn, user_id, profile_id(user_id))
    current = narrative_row(conn, narrative_id(user_id))
    return inputs_seq > 0 and (current is None or current.seq < inputs_seq)


def max_tier_seq(conn: sqlite3.Connection, user_id: str, profile_id: str) -> int:
    """The newest seq among the narrative's inputs: the profile and the eras."""
    row = conn.execute(
        "SELECT MAX(COALESCE((SELECT dreamd_seq FROM profile WHERE id = ?), 0), "
        "COALESCE((SELECT MAX(dreamd_seq) FROM eras WHERE user_id = ?), 0))",
        (profile_id, user_id),
    ).fetchone()
    return int(row[0])


def self_state(conn: sqlite3.Connection, agent_id: str) -> tuple[dict[str, Any], str] | None:
    row = conn.execute(
        "SELECT data, updated_at FROM self_state WHERE id = ?", (agent_id,)
    ).fetchone()
    if row is None:
        return None
    try:
        data = json.loads(row[0])
    except ValueError:
        data = {}
    return (data if isinstance(data, dict) else {}), row[1]


def save_self_state(
    conn: sqlite3.Connection, agent_id: str, data: dict[str, Any], now: str,
    expected_updated_at: str | None,
) -> bool:
    current = self_state(conn, agent_id)
    if (current[1] if current else None) != expected_updated_at:
        return False
    conn.execute(
        "INSERT INTO self_state (id, data, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at",
        (agent_id, json.dumps(data, sort_keys=True), now),
    )
    return True


def recent_user_turns(
    conn: sqlite3.Connection, user_id: str, after_id: int, limit: int
) -> list[Turn]:
    rows = conn.execute(
        "SELECT e.id, e.session_id, e.role, e.content, e.created_at FROM exchanges e "
        "JOIN dreamd_sessions t ON t.session_id = e.session_id "
        "WHERE e.id > ? AND t.user_id = ? ORDER BY e.id DESC LIMIT ?",
        (after_id, user_id, limit),
    ).fetchall()
    return [Turn(*r) for r in reversed(rows)]


# ---------------------------------------------------------------- LLM bookkeeping


def cached_output(conn: sqlite3.Connection, job: str, item: str) -> tuple[str, str] | None:
    """(input_hash, output) of the last output stored for this job item."""
    row = conn.execute(
        "SELECT input_hash, output FROM dreamd_outputs WHERE job = ? AND item = ?", (job, item)
    ).fetchone()
    return (row[0], row[1]) if row else None


def save_output(conn: sqlite3.Connection, job: str, item: str, input_hash: str,
                output: str) -> None:
    conn.execute(
        "INSERT INTO dreamd_outputs (job, item, input_hash, output) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(job, item) DO UPDATE SET input_hash = excluded.input_hash, "
        "output = excluded.output",
        (job, item, input_hash, output),
    )


def tokens_since(conn: sqlite3.Connection, started_at: str) -> int:
    """Tokens (in + out) recorded by passes that started at or after `started_at`."""
    row = conn.execute(
        "SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM dreamd_runs WHERE started_at >= ?",
        (started_at,),
    ).fetchone()
    return int(row[0])


# ---------------------------------------------------------------- failures


@dataclass(frozen=True)
class Failure:
    job: str
    item: str
    attempts: int
    last_error: str
    last_failed_at: str
    next_attempt_at: str
    quarantined: bool


def failures(conn: sqlite3.Connection, job: str | None = None) -> list[Failure]:
    sql = (
        "SELECT job, item, attempts, last_error, last_failed_at, next_attempt_at, quarantined "
        "FROM dreamd_failures"
    )
    rows = conn.execute(sql + (" WHERE job = ?" if job else "") + " ORDER BY job, item",
                        (job,) if job else ()).fetchall()
    return [Failure(r[0], r[1], int(r[2]), r[3], r[4], r[5], bool(r[6])) for r in rows]


def record_failure(
    conn: sqlite3.Connection, job: str, item: str, error: str, now: str, next_at: str,
    quarantine: bool,
) -> int:
    conn.execute(
        "INSERT INTO dreamd_failures (job, item, attempts, last_error, first_failed_at, "
        "last_failed_at, next_attempt_at, quarantined) VALUES (?, ?, 1, ?, ?, ?, ?, ?) "
        "ON CONFLICT(job, item) DO UPDATE SET attempts = attempts + 1, "
        "last_error = excluded.last_error, last_failed_at = excluded.last_failed_at, "
        "next_attempt_at = excluded.next_attempt_at, quarantined = excluded.quarantined",
        (job, item, error[:500], now, now, next_at, int(quarantine)),
    )
    return int(
        conn.execute(
            "SELECT attempts FROM dreamd_failures WHERE job = ? AND item = ?", (job, item)
        ).fetchone()[0]
    )


def failure_attempts(conn: sqlite3.Connection, job: str, item: str) -> int:
    """Attempts recorded so far for an item (0 when it never failed)."""
    row = conn.execute("SELECT attempts FROM dreamd_failures WHERE job = ? AND item = ?",
                       (job, item)).fetchone()
    return int(row[0]) if row else 0


def clear_failure(conn: sqlite3.Connection, job: str, item: str) -> None:
    conn.execute("DELETE FROM dreamd_failures WHERE job = ? AND item = ?", (job, item))


# ---------------------------------------------------------------- runs


def start_run(conn: sqlite3.Connection, trigger: str, pid: int, now: str) -> int:
    cur = conn.execute(
        "INSERT INTO dreamd_runs (trigger, pid, started_at, outcome) VALUES (?, ?, ?, 'running')",
        (trigger, pid, now),
    )
    return int(cur.lastrowid or 0)


def end_crashed_runs(conn: sqlite3.Connection) -> int:
    """Runs still 'running' when a dreamd starts on the file (it holds the file's lock,
    so their process is gone): mark them as ended by a crash. Returns how many."""
    cur = conn.execute(
        "UPDATE dreamd_runs SET outcome = 'crashed', "
        "error = 'dreamd (pid ' || COALESCE(pid, '?') || ') ended before the pass finished' "
        "WHERE outcome = 'running'")
    return cur.rowcount


def end_stopped_runs(conn: sqlite3.Connection, pid: int, now: str) -> None:
    """The unfinished runs of `pid`, which is leaving on a stop with a call in flight."""
    conn.execute(
        "UPDATE dreamd_runs SET outcome = 'interrupted', ended_at = ?, "
        "error = 'stopped: a backend call was still in flight when the stop grace ended' "
        "WHERE outcome = 'running' AND pid = ?", (now, pid))


def finish_run(conn: sqlite3.Connection, run_id: int, **fields: Any) -> None:
    names = sorted(fields)
    values = [
        json.dumps(fields[n], sort_keys=True) if isinstance(fields[n], dict | list) else fields[n]
        for n in names
    ]
    assignments = ", ".join(f"{n} = ?" for n in names)
    conn.execute(f"UPDATE dreamd_runs SET {assignments} WHERE id = ?", (*values, run_id))


def recent_runs(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    conn_rows = conn.execute(
        "SELECT id, trigger, pid, started_at, ended_at, outcome, drives_before, drives_after, "
        "stats_before, stats_after, jobs, tokens_in, tokens_out, error, notes, write_lock "
        "FROM dreamd_runs "
        "ORDER BY id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    keys = ("id", "trigger", "pid", "started_at", "ended_at", "outcome", "drives_before",
            "drives_after", "stats_before", "stats_after", "jobs", "tokens_in", "tokens_out",
            "error", "notes", "write_lock")
    out = []
    for row in conn_rows:
        record = dict(zip(keys, row, strict=True))
        for k in ("drives_before", "drives_after", "stats_before", "stats_after", "jobs", "notes",
                  "write_lock"):
            record[k] = json.loads(record[k]) if record[k] else None
        out.append(record)
    return out


# ---------------------------------------------------------------- invalidation and forgetting


def bump_vector_epoch(conn: sqlite3.Connection) -> None:
    """Tell in-process indexes (recall, gists) that rows they hold may be gone."""
    set_state(conn, "vector_epoch", str(int(get_state(conn, "vector_epoch", "0") or 0) + 1))


def drop_outputs(conn: sqlite3.Connection, job: str, item: str) -> None:
    """A job item's stored LLM output and failure record (both may quote its inputs)."""
    conn.execute("DELETE FROM dreamd_outputs WHERE job = ? AND item = ?", (job, item))
    conn.execute("DELETE FROM dreamd_failures WHERE job = ? AND item = ?", (job, item))


def drop_gist(conn: sqlite3.Connection, session_id: str) -> bool:
    """Delete a session's gist and its vectors; the tally's mark goes back to the start, so
    the next pass summarizes whatever turns remain. Returns whether a gist existed."""
    gone = conn.execute("DELETE FROM summaries WHERE session_id = ?", (session_id,)).rowcount
    delete_vectors(conn, "summary", session_id)
    drop_outputs(conn, "summarize", session_id)
    conn.execute("UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 "
                 "WHERE session_id = ?", (session_id,))
    return bool(gone)


def drop_tiers(conn: sqlite3.Connection, user_id: str, agent_id: str, months: set[str]
               ) -> list[str]:
    """Delete what was built from a user's gists — profile, narrative, the eras of `months`,
    the agent's reflection state with that user — so the next pass rebuilds them from what
    remains. Returns what went, as "table:key"."""
    gone: list[str] = []
    for table, key, job in (("profile", profile_id(user_id), "profile"),
                            ("narrative", narrative_id(user_id), "narrative")):
        if conn.execute(f"DELETE FROM {table} WHERE id = ?", (key,)).rowcount:
            gone.append(f"{table}:{key}")
        drop_outputs(conn, job, key)
    for month in sorted(months):
        if conn.execute("DELETE FROM eras WHERE user_id = ? AND month = ?",
                        (user_id, month)).rowcount:
            gone.append(f"eras:{era_key(user_id, month)}")
        delete_vectors(conn, "era", era_key(user_id, month))
        drop_outputs(conn, "eras", era_key(user_id, month))
    key = self_state_id(agent_id, user_id)
    state = self_state(conn, key)
    if state is not None:
        data, _ = state
        kept = {k: v for k, v in data.items() if k == "drives"} if key == agent_id else {}
        if kept:
            conn.execute("UPDATE self_state SET data = ? WHERE id = ?",
                         (json.dumps(kept, sort_keys=True), key))
        else:
            conn.execute("DELETE FROM self_state WHERE id = ?", (key,))
        gone.append(f"self_state:{key}")
        # Move the agent's mark back before this user's remaining turns, so the next
        # reflect job builds the state again from what is left.
        first = conn.execute("SELECT MIN(first_id) FROM dreamd_sessions WHERE user_id = ?",
                             (user_id,)).fetchone()[0]
        marks = reflection_marks(conn, agent_id)
        if first is not None and marks.exchange_id >= first:
            save_reflection_marks(conn, ReflectionMarks(first - 1, 0, marks.at))
    drop_outputs(conn, "reflect", key)
    return gone


def owner_changes(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(session id, the app's user id) where the app's sessions row names another owner
    than the tally."""
    rows = conn.execute(
        "SELECT s.id, s.user_id FROM sessions s "
        "JOIN dreamd_sessions d ON d.session_id = s.id WHERE d.user_id != s.user_id"
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def rehome_session(conn: sqlite3.Connection, session_id: str, user_id: str, agent_id: str
                   ) -> bool:
    """The app says this session belongs to `user_id` but the tally filed it under someone
    else: move it, and drop what the other user's memory built from it. Returns whether
    anything moved."""
    row = conn.execute("SELECT user_id, month FROM dreamd_sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    if row is None or row[0] == user_id:
        return False
    old_user, month = row
    conn.execute("UPDATE dreamd_sessions SET user_id = ? WHERE session_id = ?",
                 (user_id, session_id))
    months = {m for (m,) in conn.execute(
        "SELECT dreamd_month FROM summaries WHERE session_id = ? AND dreamd_month IS NOT NULL",
        (session_id,))} | {month}
    if drop_gist(conn, session_id):
        drop_tiers(conn, old_user, agent_id, months)
        bump_vector_epoch(conn)
    return True


@dataclass(frozen=True)
class ReflectionMarks:
    exchange_id: int
    seq: int
    at: str | None


def reflection_marks(conn: sqlite3.Connection, agent_id: str) -> ReflectionMarks:
    """How far the agent's last complete reflect job reached, over every user.

    Kept in dreamd_state; a file from before per-user reflection has them in the agent's
    self-state row.
    """
    raw = get_state(conn, "reflected")
    if raw is None:
        state = self_state(conn, agent_id)
        marks = (state[0].get("dreamd") if state else None) or {}
    else:
        marks = json.loads(raw)
    return ReflectionMarks(int(marks.get("reflected_exchange_id", 0)),
                           int(marks.get("reflected_seq", 0)), marks.get("reflected_at"))


def save_reflection_marks(conn: sqlite3.Connection, marks: ReflectionMarks) -> None:
    set_state(conn, "reflected", json.dumps({
        "reflected_exchange_id": marks.exchange_id, "reflected_seq": marks.seq,
        "reflected_at": marks.at}, sort_keys=True))


def count_user_turns_after(conn: sqlite3.Connection, user_id: str, after_id: int) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM exchanges e JOIN dreamd_sessions t ON t.session_id = e.session_id "
        "WHERE e.id > ? AND t.user_id = ?", (after_id, user_id)).fetchone()
    return int(row[0])


def vector_of(conn: sqlite3.Connection, model: str, kind: str, key: str) -> bytes | None:
    row = conn.execute("SELECT vector FROM dreamd_vectors WHERE model = ? AND kind = ? "
                       "AND key = ?", (model, kind, key)).fetchone()
    return row[0] if row else None


def session_months(conn: sqlite3.Connection, session_id: str) -> set[str]:
    """The months a session's turns and gist were filed under."""
    rows = conn.execute(
        "SELECT month FROM dreamd_sessions WHERE session_id = ?1 UNION "
        "SELECT dreamd_month FROM summaries WHERE session_id = ?1 AND dreamd_month IS NOT NULL",
        (session_id,)).fetchall()
    return {r[0] for r in rows}


def recount_session(conn: sqlite3.Connection, session_id: str) -> None:
    """Rebuild a session's tally row from the turns it has left (after a partial forget)."""
    row = conn.execute(
        "SELECT COUNT(*), MIN(id), MAX(id), MIN(created_at), MAX(created_at) FROM exchanges "
        "WHERE session_id = ?", (session_id,)).fetchone()
    first_at, last_at = iso_utc(row[3]), iso_utc(row[4])
    conn.execute(
        "UPDATE dreamd_sessions SET turns = ?, first_id = ?, last_id = ?, first_at = ?, "
        "last_at = ?, month = substr(?, 1, 7), summarized_id = 0, summarized_turns = 0 "
        "WHERE session_id = ?",
        (row[0], row[1], row[2], first_at, last_at, first_at, session_id))


def tiers_present(conn: sqlite3.Connection, user_id: str, agent_id: str, months: set[str]
                  ) -> list[str]:
    """What drop_tiers would delete, as "table:key" (for a dry run)."""
    out = []
    for table, key in (("profile", profile_id(user_id)), ("narrative", narrative_id(user_id))):
        if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (key,)).fetchone():
            out.append(f"{table}:{key}")
    eras = era_seqs(conn, user_id)
    out += [f"eras:{era_key(user_id, m)}" for m in sorted(months) if m in eras]
    if self_state(conn, self_state_id(agent_id, user_id)) is not None:
        out.append(f"self_state:{self_state_id(agent_id, user_id)}")
    return out


def vector_models(conn: sqlite3.Connection, table: str) -> list[str]:
    """The models with rows in a vector table, by a skip-scan of its (model, …) key: the
    key's first column, so that deletes by id can use the index."""
    rows = conn.execute(
        f"WITH RECURSIVE m(model) AS (SELECT MIN(model) FROM {table} "
        f"UNION ALL SELECT (SELECT MIN(model) FROM {table} WHERE model > m.model) FROM m "
        f"WHERE m.model IS NOT NULL) SELECT model FROM m WHERE model IS NOT NULL").fetchall()
    return [r[0] for r in rows]


def delete_vectors(conn: sqlite3.Connection, kind: str, key: str) -> None:
    for model in vector_models(conn, "dreamd_vectors"):
        conn.execute("DELETE FROM dreamd_vectors WHERE model = ? AND kind = ? AND key = ?",
                     (model, kind, key))


# ---------------------------------------------------------------- the read path


def turn_vector_rows(conn: sqlite3.Connection, model: str, after_id: int,
                     upto_id: int | None = None) -> list[tuple[int, bytes, str]]:
    """(exchange id, vector, session) of this model's turn vectors past `after_id`, in
    id order; only turns the app still has."""
    sql = ("SELECT v.exchange_id, v.vector, e.session_id FROM dreamd_exchange_vectors v "
           "JOIN exchanges e ON e.id = v.exchange_id "
           "WHERE v.model = ? AND v.exchange_id > ?")
    params: tuple[object, ...] = (model, after_id)
    if upto_id is not None:
        sql, params = sql + " AND v.exchange_id <= ?", (*params, upto_id)
    return conn.execute(sql + " ORDER BY v.exchange_id", params).fetchall()


def gist_vector_rows(conn: sqlite3.Connection, model: str, user_id: str, after_seq: int
                     ) -> list[tuple[str, int, bytes]]:
    """(session, seq, vector) of a user's gists newer than `after_seq`."""
    return conn.execute(
        "SELECT s.session_id, s.dreamd_seq, v.vector FROM summaries s "
        "JOIN dreamd_vectors v ON v.model = ? AND v.kind = 'summary' "
        "AND v.key = s.session_id WHERE s.user_id = ? AND s.dreamd_seq > ?",
        (model, user_id, after_seq)).fetchall()


def search_words(conn: sqlite3.Connection, words: list[str], limit: int) -> dict[int, float]:
    """exchange id -> BM25 relevance (higher is better) of the best `limit` turns holding
    any of `words` (each matched as a quoted term: user text is never query syntax)."""
    if not words:
        return {}
    query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    rows = conn.execute(
        "SELECT rowid, -bm25(dreamd_fts) FROM dreamd_fts WHERE dreamd_fts MATCH ? "
        "ORDER BY bm25(dreamd_fts) LIMIT ?", (query, limit)).fetchall()
    return {int(r[0]): float(r[1]) for r in rows}


def add_turn(conn: sqlite3.Connection, session_id: str, role: str, content: str,
             created_at: str) -> int:
    """One turn as the app writes it; its id."""
    cur = conn.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                       "VALUES (?, ?, ?, ?)", (session_id, role, content, created_at))
    return int(cur.lastrowid or 0)


def put_turn_vector(conn: sqlite3.Connection, model: str, exchange_id: int, vector: bytes
                    ) -> None:
    """A turn's vector stored at once (the embed job's watermark still covers the gap)."""
    conn.execute("INSERT OR REPLACE INTO dreamd_exchange_vectors (model, exchange_id, vector) "
                 "VALUES (?, ?, ?)", (model, exchange_id, vector))


def last_turns(conn: sqlite3.Connection, session_id: str, n: int
               ) -> list[tuple[str, str, str]]:
    """(role, content, created_at) of a session's last `n` turns, oldest first."""
    rows = conn.execute("SELECT role, content, created_at FROM exchanges WHERE session_id = ? "
                        "ORDER BY id DESC LIMIT ?", (session_id, n)).fetchall()
    return [(r[0], r[1], r[2]) for r in reversed(rows)]


def gist_texts(conn: sqlite3.Connection, sessions: list[str]) -> dict[str, str]:
    """session -> "month gist" for these sessions' gists."""
    if not sessions:
        return {}
    marks = ",".join("?" * len(sessions))
    return dict(conn.execute(
        f"SELECT session_id, COALESCE(dreamd_month, '') || ' ' || content FROM summaries "
        f"WHERE session_id IN ({marks})", sessions).fetchall())


def sessions_of_turns(conn: sqlite3.Connection, ids: list[int]) -> list[tuple[int, str]]:
    """(id, session) of these turns, those the app still has."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, session_id FROM exchanges WHERE id IN ({marks})", ids)
    return [(int(r[0]), str(r[1])) for r in rows]


def turns_by_id(conn: sqlite3.Connection, ids: list[int]) -> dict[int, Turn]:
    """These turns, by id (those the app still has)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, session_id, role, content, created_at FROM exchanges "
                        f"WHERE id IN ({marks})", ids)
    return {int(r[0]): Turn(*r) for r in rows}


# ---------------------------------------------------------------- importing


def app_embeds_turns(conn: sqlite3.Connection) -> bool:
    """Whether the app stores its own embedding with every turn (NOT NULL column)."""
    return any(r[1] == "embedding" and r[3]
               for r in conn.execute("PRAGMA table_info(exchanges)"))


def add_session(conn: sqlite3.Connection, session_id: str, name: str | None, created_at: str,
                user_id: str) -> None:
    """The app's sessions row, unless it has one (an existing session keeps its owner)."""
    conn.execute("INSERT OR IGNORE INTO sessions (id, name, created_at, user_id) "
                 "VALUES (?, ?, ?, ?)", (session_id, name, created_at, user_id))


def add_turns(conn: sqlite3.Connection, rows: list[tuple[str, str, str, str]]) -> None:
    """Turns as the app writes them: (session, role, content, created_at), plain text."""
    conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                     "VALUES (?, ?, ?, ?)", rows)


def turn_keys(conn: sqlite3.Connection, session_id: str) -> set[tuple[str, str, str]]:
    """(role, content, created_at) of a session's turns: what a re-import finds present."""
    rows = conn.execute("SELECT role, content, created_at FROM exchanges WHERE session_id = ?",
                        (session_id,))
    return {(r[0], r[1], r[2]) for r in rows}

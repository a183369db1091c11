"""Vectors per model and the full-text index: what embed writes and recall reads."""

from __future__ import annotations

import json

import numpy as np

from dreamd.ids import (
    split_era_key,
)
from dreamd.models import Turn
from dreamd.store.interface import Conn, dialect
from dreamd.store.state import from_blob, get_state, set_state


def put_vector(conn: Conn, model: str, kind: str, key: str, vector: bytes) -> None:
    conn.execute(
        "INSERT INTO dreamd_vectors (model, kind, key, vector) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(model, kind, key) DO UPDATE SET vector = excluded.vector",
        (model, kind, key, vector),
    )


def embed_watermark(conn: Conn, model: str) -> int:
    row = conn.execute(
        "SELECT last_exchange_id FROM dreamd_embed_state WHERE model = ?", (model,)
    ).fetchone()
    return int(row[0]) if row else 0


def turns_after(conn: Conn, after_id: int, limit: int, upto_id: int
                ) -> list[Turn]:
    """Up to `limit` turns with after_id < id <= upto_id, in id order."""
    rows = conn.execute(
        "SELECT id, session_id, role, content, created_at FROM exchanges "
        "WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (after_id, upto_id, limit),
    ).fetchall()
    return [Turn(*r) for r in rows]


def save_turn_vectors(conn: Conn, model: str, dim: int, rows: list[tuple[int, bytes]],
                      upto: int) -> bool:
    """These turns' vectors (a turn that has one already keeps the newer), and the model's
    watermark moved up to the first turn (to `upto`) still without one. Workers embedding
    other users' turns at once each see only their own batch: the mark may stop short of
    where it could be (the next batch moves it on), and it never moves down."""
    conn.executemany(
        "INSERT INTO dreamd_exchange_vectors (model, exchange_id, vector) VALUES (?, ?, ?) "
        "ON CONFLICT(model, exchange_id) DO UPDATE SET vector = excluded.vector",
        [(model, exchange_id, blob) for exchange_id, blob in rows],
    )
    after = embed_watermark(conn, model)
    row = conn.execute(
        "SELECT e.id FROM exchanges e WHERE e.id > ? AND e.id <= ? AND NOT EXISTS "
        "(SELECT 1 FROM dreamd_exchange_vectors v WHERE v.model = ? AND v.exchange_id = e.id) "
        "ORDER BY e.id LIMIT 1", (after, upto, model)).fetchone()
    reached = max(after, upto if row is None else int(row[0]) - 1)
    conn.execute(
        "INSERT INTO dreamd_embed_state (model, dim, last_exchange_id) VALUES (?, ?, ?) "
        "ON CONFLICT(model) DO UPDATE SET dim = excluded.dim, "
        "last_exchange_id = excluded.last_exchange_id "
        "WHERE dreamd_embed_state.last_exchange_id < excluded.last_exchange_id",
        (model, dim, reached))
    return True


def derived_without_vector(
    conn: Conn, model: str, limit: int
) -> list[tuple[str, str, str, str]]:
    """(kind, key, content, user) of gists, eras and facts that have no vector of `model`
    yet."""
    rows = conn.execute(
        "SELECT 'summary', session_id, content, user_id FROM summaries s WHERE NOT EXISTS "
        "(SELECT 1 FROM dreamd_vectors v WHERE v.model = ?1 AND v.kind = 'summary' "
        "AND v.key = s.session_id) "
        "UNION ALL SELECT 'era', user_id || '|' || month, content, user_id FROM eras e "
        "WHERE NOT EXISTS (SELECT 1 FROM dreamd_vectors v WHERE v.model = ?1 AND "
        "v.kind = 'era' AND v.key = e.user_id || '|' || e.month) "
        "UNION ALL SELECT 'fact', CAST(id AS TEXT), statement, user_id FROM facts f "
        "WHERE NOT EXISTS (SELECT 1 FROM dreamd_vectors v WHERE v.model = ?1 AND "
        "v.kind = 'fact' AND v.key = CAST(f.id AS TEXT)) LIMIT ?2",
        (model, limit),
    ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def save_derived_vectors(
    conn: Conn, model: str, rows: list[tuple[str, str, str, bytes]]
) -> int:
    """Store vectors for derived rows whose content is still what was embedded."""
    stored = 0
    for kind, key, content, blob in rows:
        if kind == "summary":
            current = conn.execute(
                "SELECT content FROM summaries WHERE session_id = ?", (key,)).fetchone()
        elif kind == "fact":
            current = conn.execute("SELECT statement FROM facts WHERE id = ?",
                                   (int(key),)).fetchone()
        else:
            current = conn.execute("SELECT content FROM eras WHERE user_id = ? AND month = ?",
                                   split_era_key(key)).fetchone()
        if current and current[0] == content:
            put_vector(conn, model, kind, key, blob)
            stored += 1
    return stored


def fts_watermark(conn: Conn) -> int:
    return int(get_state(conn, "fts_id", "0") or 0)


FTS_REDO = "fts_redo"


def fts_redo(conn: Conn) -> list[int]:
    """Turns whose words must be indexed again: a neighbour of theirs was forgotten."""
    return [int(i) for i in json.loads(get_state(conn, FTS_REDO) or "[]")]


def redo_words_of(conn: Conn, ids: list[int]) -> None:
    """Take these turns out of the full-text index until the embed job indexes them again
    (their indexed text holds a neighbour's words that are being erased)."""
    if not ids:
        return
    drop_words(conn, ids)
    set_state(conn, FTS_REDO, json.dumps(sorted(set(fts_redo(conn)) | set(ids))))


def words_key(conn: Conn) -> str:
    """The words index's turn-id column: FTS5's rowid, or PostgreSQL's id."""
    return dialect(conn).words_key


def drop_words(conn: Conn, ids: list[int]) -> None:
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        conn.execute(f"DELETE FROM dreamd_fts WHERE {words_key(conn)} IN "
                     f"({','.join('?' * len(chunk))})", chunk)


def index_texts(conn: Conn, rows: list[tuple[int, str]], redone: tuple[int, ...] = ()
                ) -> None:
    """Put these (turn id, text) rows into the full-text index, replacing a turn's older
    text (a turn whose neighbour arrived since); `redone` leave the list of turns to
    index again."""
    if redone:
        left = sorted(set(fts_redo(conn)) - set(redone))
        if left:
            set_state(conn, FTS_REDO, json.dumps(left))
        else:
            conn.execute("DELETE FROM dreamd_state WHERE key = ?", (FTS_REDO,))
    drop_words(conn, [i for i, _ in rows])
    conn.executemany(f"INSERT INTO dreamd_fts ({words_key(conn)}, text) VALUES (?, ?)", rows)


def ids_after(conn: Conn, after_id: int, limit: int, upto_id: int) -> list[int]:
    """Up to `limit` turn ids after `after_id`, to `upto_id`, in order."""
    return [int(r[0]) for r in conn.execute(
        "SELECT id FROM exchanges WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (after_id, upto_id, limit))]


def with_neighbours(conn: Conn, ids: list[int]
                    ) -> list[tuple[Turn, Turn | None, Turn | None]]:
    """These turns in id order, each with the turns before and after it in its session
    (as the file holds them now): index seeks only."""
    links: list[tuple[int, int | None, int | None]] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        links += conn.execute(
            "SELECT e.id, (SELECT p.id FROM exchanges p WHERE p.session_id = e.session_id "
            "AND p.id < e.id ORDER BY p.id DESC LIMIT 1), (SELECT n.id FROM exchanges n "
            "WHERE n.session_id = e.session_id AND n.id > e.id ORDER BY n.id LIMIT 1) "
            f"FROM exchanges e WHERE e.id IN ({','.join('?' * len(chunk))}) ORDER BY e.id",
            chunk).fetchall()
    wanted = sorted({i for link in links for i in link if i is not None})
    turns: dict[int, Turn] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for r in conn.execute("SELECT id, session_id, role, content, created_at FROM "
                              f"exchanges WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            turns[int(r[0])] = Turn(*r)
    return [(turns[i], turns.get(p) if p else None, turns.get(n) if n else None)
            for i, p, n in links if i in turns]


def scope_sql(users: list[str] | None, default_too: bool) -> tuple[str, tuple[str, ...]]:
    """A condition on `e.session_id`: the session belongs to one of `users` (None: anyone);
    with `default_too`, a session no table has filed under anyone counts as theirs."""
    if users is None:
        return "1", ()
    marks = ",".join("?" * len(users))
    mine = (f"(e.session_id IN (SELECT id FROM sessions WHERE user_id IN ({marks})) OR "
            f"e.session_id IN (SELECT session_id FROM dreamd_sessions "
            f"WHERE user_id IN ({marks})))")
    if not default_too:
        return mine, (*users, *users)
    others = (f"(e.session_id IN (SELECT id FROM sessions WHERE user_id NOT IN ({marks})) OR "
              f"e.session_id IN (SELECT session_id FROM dreamd_sessions "
              f"WHERE user_id NOT IN ({marks})))")
    return f"({mine} OR NOT {others})", (*users, *users, *users, *users)

def turn_vectors(conn: Conn, model: str, ids: list[int]) -> dict[int, np.ndarray]:
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


def vector_of(conn: Conn, model: str, kind: str, key: str) -> bytes | None:
    row = conn.execute("SELECT vector FROM dreamd_vectors WHERE model = ? AND kind = ? "
                       "AND key = ?", (model, kind, key)).fetchone()
    return row[0] if row else None


def vector_models(conn: Conn, table: str) -> list[str]:
    """The models with rows in a vector table, by a skip-scan of its (model, …) key: the
    key's first column, so that deletes by id can use the index."""
    rows = conn.execute(
        f"WITH RECURSIVE m(model) AS (SELECT MIN(model) FROM {table} "
        f"UNION ALL SELECT (SELECT MIN(model) FROM {table} WHERE model > m.model) FROM m "
        f"WHERE m.model IS NOT NULL) SELECT model FROM m WHERE model IS NOT NULL").fetchall()
    return [r[0] for r in rows]


def delete_vectors(conn: Conn, kind: str, key: str) -> None:
    for model in vector_models(conn, "dreamd_vectors"):
        conn.execute("DELETE FROM dreamd_vectors WHERE model = ? AND kind = ? AND key = ?",
                     (model, kind, key))


def turn_vector_rows(conn: Conn, model: str, after_id: int, upto_id: int | None = None,
                     users: list[str] | None = None, default_too: bool = False
                     ) -> list[tuple[int, bytes, str, str, str]]:
    """(exchange id, vector, session, speaker, created_at) of this model's turn vectors past
    `after_id`, in id order, of the sessions of `users` (None: everyone's); only turns the
    app still has. Named users' turns are read from their sessions (index seeks, however
    many other users the file holds); sessions filed under nobody yet need a look at
    every turn past `after_id`."""
    upto = "" if upto_id is None else " AND e.id <= ?"
    bound: tuple[object, ...] = () if upto_id is None else (upto_id,)
    if users is not None and not default_too:
        marks = ",".join("?" * len(users))
        return conn.execute(
            f"WITH mine(session_id) AS (SELECT id FROM sessions WHERE user_id IN ({marks}) "
            f"UNION SELECT session_id FROM dreamd_sessions WHERE user_id IN ({marks})) "
            # CROSS JOIN fixes the order: sessions, their turns by (session_id, id), then
            # each turn's vector by its key (the planner, left alone, scans vectors).
            "SELECT v.exchange_id, v.vector, e.session_id, e.role, e.created_at FROM mine m "
            "CROSS JOIN exchanges e CROSS JOIN dreamd_exchange_vectors v "
            f"WHERE e.session_id = m.session_id AND e.id > ?{upto} "
            "AND v.model = ? AND v.exchange_id = e.id "
            "ORDER BY e.id", (*users, *users, after_id, *bound, model)).fetchall()
    scope, scope_params = scope_sql(users, default_too)
    return conn.execute(
        "SELECT v.exchange_id, v.vector, e.session_id, e.role, e.created_at FROM exchanges e "
        "JOIN dreamd_exchange_vectors v ON v.model = ? AND v.exchange_id = e.id "
        f"WHERE e.id > ? AND {scope}{upto} ORDER BY e.id",
        (model, after_id, *scope_params, *bound)).fetchall()


def gist_vector_rows(conn: Conn, model: str, user_id: str, after_seq: int
                     ) -> list[tuple[str, int, bytes]]:
    """(session, seq, vector) of a user's gists newer than `after_seq`."""
    return conn.execute(
        "SELECT s.session_id, s.dreamd_seq, v.vector FROM summaries s "
        "JOIN dreamd_vectors v ON v.model = ? AND v.kind = 'summary' "
        "AND v.key = s.session_id WHERE s.user_id = ? AND s.dreamd_seq > ?",
        (model, user_id, after_seq)).fetchall()


def search_words(conn: Conn, words: list[str], limit: int, users: list[str] | None = None,
                 default_too: bool = False) -> dict[int, float]:
    """exchange id -> BM25 relevance (higher is better) of the best `limit` turns of
    `users` (None: anyone's) holding any of `words`, ranked among those turns only. Each
    word is matched as a quoted term: user text is never query syntax."""
    if not words:
        return {}
    scope, scope_params = scope_sql(users, default_too)
    return dialect(conn).search_words(conn, words, limit, scope, scope_params)


def put_turn_vector(conn: Conn, model: str, exchange_id: int, vector: bytes
                    ) -> None:
    """A turn's vector stored at once (the embed job's watermark still covers the gap)."""
    conn.execute("INSERT INTO dreamd_exchange_vectors (model, exchange_id, vector) "
                 "VALUES (?, ?, ?) ON CONFLICT(model, exchange_id) DO UPDATE SET "
                 "vector = excluded.vector", (model, exchange_id, vector))

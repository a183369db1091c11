"""Vectors per model and the full-text index: what embed writes and recall reads."""

from __future__ import annotations

import numpy as np

from dreamd.ids import (
    split_era_key,
)
from dreamd.models import Turn
from dreamd.store.interface import Conn
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


def save_turn_vectors(
    conn: Conn,
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
    conn: Conn, model: str, limit: int
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
    conn: Conn, model: str, rows: list[tuple[str, str, str, bytes]]
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


def fts_watermark(conn: Conn) -> int:
    return int(get_state(conn, "fts_id", "0") or 0)


def index_text(conn: Conn, after_id: int, upto_id: int) -> None:
    """Add turns after_id < id <= upto_id to the full-text index and move its mark."""
    conn.execute(
        "INSERT INTO dreamd_fts (rowid, text) SELECT id, role || ': ' || content "
        "FROM exchanges WHERE id > ? AND id <= ?",
        (after_id, upto_id),
    )
    set_state(conn, "fts_id", str(upto_id))


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


def turn_vector_rows(conn: Conn, model: str, after_id: int,
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


def gist_vector_rows(conn: Conn, model: str, user_id: str, after_seq: int
                     ) -> list[tuple[str, int, bytes]]:
    """(session, seq, vector) of a user's gists newer than `after_seq`."""
    return conn.execute(
        "SELECT s.session_id, s.dreamd_seq, v.vector FROM summaries s "
        "JOIN dreamd_vectors v ON v.model = ? AND v.kind = 'summary' "
        "AND v.key = s.session_id WHERE s.user_id = ? AND s.dreamd_seq > ?",
        (model, user_id, after_seq)).fetchall()


def search_words(conn: Conn, words: list[str], limit: int) -> dict[int, float]:
    """exchange id -> BM25 relevance (higher is better) of the best `limit` turns holding
    any of `words` (each matched as a quoted term: user text is never query syntax)."""
    if not words:
        return {}
    query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    rows = conn.execute(
        "SELECT rowid, -bm25(dreamd_fts) FROM dreamd_fts WHERE dreamd_fts MATCH ? "
        "ORDER BY bm25(dreamd_fts) LIMIT ?", (query, limit)).fetchall()
    return {int(r[0]): float(r[1]) for r in rows}


def put_turn_vector(conn: Conn, model: str, exchange_id: int, vector: bytes
                    ) -> None:
    """A turn's vector stored at once (the embed job's watermark still covers the gap)."""
    conn.execute("INSERT OR REPLACE INTO dreamd_exchange_vectors (model, exchange_id, vector) "
                 "VALUES (?, ?, ?)", (model, exchange_id, vector))

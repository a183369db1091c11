"""Turns that still wait for a turn-level job (embed, the words index, facts), for every
user or for some: several workers, each holding some users, work on the same file.

A turn's vector and its row in the words index mark it done; the facts job keeps how far
it read in each session (`dreamd_sessions.facts_id`). The file-wide marks (the embed and
words watermarks) move up to the first turn still waiting, whoever's it is, so recall
and sensing keep reading them as before.
"""

from __future__ import annotations

from dreamd.store.interface import Conn
from dreamd.store.state import of_users, raise_state
from dreamd.store.vectors import fts_watermark, words_key


def _scope(users: list[str] | None) -> tuple[str, str, tuple[str, ...]]:
    """(join, condition, params) that keep the turns of `users` (None: everyone's)."""
    if users is None:
        return "", "", ()
    where, params = of_users("t.user_id", users)
    return "JOIN dreamd_sessions t ON t.session_id = e.session_id ", f"{where} ", params


def _vector_missing(model_mark: str = "?") -> str:
    return (f"NOT EXISTS (SELECT 1 FROM dreamd_exchange_vectors v WHERE v.model = {model_mark} "
            "AND v.exchange_id = e.id)")


def unembedded_ids(conn: Conn, model: str, after: int, upto: int, limit: int,
                   users: list[str] | None = None) -> list[int]:
    """Up to `limit` turns (after < id <= upto) of `users` without a vector of `model`."""
    join, where, params = _scope(users)
    return [int(r[0]) for r in conn.execute(
        f"SELECT e.id FROM exchanges e {join}WHERE e.id > ? AND e.id <= ? {where}"
        f"AND {_vector_missing()} ORDER BY e.id LIMIT ?",
        (after, upto, *params, model, limit))]


def count_unembedded(conn: Conn, model: str, after: int, upto: int,
                     users: list[str] | None = None) -> int:
    """The turns in the range, less those with a vector: two range scans. (A NOT EXISTS
    probe per turn seeks the vectors' key, and a vector's row is longer than a key page
    keeps in place: each probe step read the whole row, 560 bytes from the file on a
    SQLite built with direct overflow reads — 2.7 million reads in a 10,000-turn pass.)"""
    join, where, params = _scope(users)
    turns = conn.execute(
        f"SELECT COUNT(*) FROM exchanges e {join}WHERE e.id > ? AND e.id <= ? {where}",
        (after, upto, *params)).fetchone()[0]
    embedded = conn.execute(
        "SELECT COUNT(*) FROM dreamd_exchange_vectors v JOIN exchanges e "
        f"ON e.id = v.exchange_id {join}WHERE v.model = ? AND v.exchange_id > ? "
        f"AND v.exchange_id <= ? {where}", (model, after, upto, *params)).fetchone()[0]
    return int(turns) - int(embedded)


def _unindexed(conn: Conn) -> str:
    return f"NOT EXISTS (SELECT 1 FROM dreamd_fts f WHERE f.{words_key(conn)} = e.id)"


def unindexed_ids(conn: Conn, after: int, upto: int, limit: int,
                  users: list[str] | None = None) -> list[int]:
    """Up to `limit` turns (after < id <= upto) of `users` not in the words index."""
    join, where, params = _scope(users)
    return [int(r[0]) for r in conn.execute(
        f"SELECT e.id FROM exchanges e {join}WHERE e.id > ? AND e.id <= ? {where}"
        f"AND {_unindexed(conn)} ORDER BY e.id LIMIT ?", (after, upto, *params, limit))]


def count_unindexed(conn: Conn, after: int, upto: int, users: list[str] | None = None
                    ) -> int:
    """The turns in the range (of `users`) less those the words index holds: two range
    scans, as `count_unembedded`."""
    join, where, params = _scope(users)
    turns = conn.execute(
        f"SELECT COUNT(*) FROM exchanges e {join}WHERE e.id > ? AND e.id <= ? {where}",
        (after, upto, *params)).fetchone()[0]
    key = words_key(conn)
    held = conn.execute(
        f"SELECT COUNT(*) FROM dreamd_fts f JOIN exchanges e ON e.id = f.{key} {join}"
        f"WHERE f.{key} > ? AND f.{key} <= ? {where}", (after, upto, *params)).fetchone()[0]
    return int(turns) - int(held)


def indexed(conn: Conn, ids: list[int]) -> set[int]:
    """Which of these turns the words index holds."""
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    key = words_key(conn)
    return {int(r[0]) for r in conn.execute(
        f"SELECT {key} FROM dreamd_fts WHERE {key} IN ({marks})", ids)}


def settle_words_watermark(conn: Conn, upto: int) -> int:
    """Inside a write: the words index's mark up to the first turn it does not hold."""
    after = fts_watermark(conn)
    row = conn.execute(
        f"SELECT e.id FROM exchanges e WHERE e.id > ? AND e.id <= ? AND {_unindexed(conn)} "
        "ORDER BY e.id LIMIT 1", (after, upto)).fetchone()
    reached = upto if row is None else int(row[0]) - 1
    if reached > after:
        raise_state(conn, "fts_id", reached)
    return max(reached, after)


def unread_turns(conn: Conn, upto: int, limit: int, users: list[str] | None = None
                 ) -> list[tuple[int, str, int]]:
    """(turn id, session, the session's mark) of up to `limit` turns (to `upto`) the facts
    job has not read, in id order, from the sessions of `users` that have any."""
    where, params = of_users("t.user_id", users)
    rows = conn.execute(
        "SELECT e.id, e.session_id, t.facts_id FROM dreamd_sessions t "
        f"CROSS JOIN exchanges e WHERE t.last_id > t.facts_id{where} "
        "AND e.session_id = t.session_id AND e.id > t.facts_id AND e.id <= ? "
        "ORDER BY e.id LIMIT ?", (*params, upto, limit)).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def count_unread(conn: Conn, users: list[str] | None = None) -> int:
    """Turns the tally has counted that the facts job has not read: each unread session's
    turns less those read, summed over the partial index (no turn is looked at)."""
    where, params = of_users("user_id", users)
    return int(conn.execute(
        "SELECT COALESCE(SUM(turns - facts_turns), 0) FROM dreamd_sessions "
        f"WHERE last_id > facts_id{where}", params).fetchone()[0])


class Moved(Exception):
    """Another worker read these turns meanwhile: the write that found it rolls back."""


def mark_read(conn: Conn, marks: dict[str, tuple[int, int, int]]) -> None:
    """Inside a write: each session's facts mark moved from its old value to its new one,
    past `read` more turns; raises `Moved` (so the write rolls back) when another worker
    moved one meanwhile. Sessions are changed in the order of their ids (see
    `fallback.send_back`)."""
    for session, (old, new, read) in sorted(marks.items()):
        cur = conn.execute("UPDATE dreamd_sessions SET facts_id = ?, "
                           "facts_turns = facts_turns + ? WHERE session_id = ? "
                           "AND facts_id = ?", (new, read, session, old))
        if cur.rowcount != 1:
            raise Moved(session)


def users_with_work(conn: Conn, model: str) -> list[str]:
    """Users with turns a turn-level job or summarize has not done, or tiers that may be
    behind their gists (the tier queue): the users a worker may claim. One pass over the
    tally."""
    embedded = int(conn.execute("SELECT COALESCE((SELECT last_exchange_id FROM "
                                "dreamd_embed_state WHERE model = ?), 0)",
                                (model,)).fetchone()[0])
    words = fts_watermark(conn)
    found = {str(r[0]) for r in conn.execute(
        "SELECT DISTINCT user_id FROM dreamd_sessions WHERE last_id > summarized_id "
        "OR last_id > facts_id OR last_id > ? OR last_id > ?", (embedded, words))}
    found |= {str(r[0]) for r in conn.execute("SELECT user_id FROM dreamd_tier_queue")}
    return sorted(found)

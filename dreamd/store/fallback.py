"""Rows the extractive fallback made where a model's answers were rejected: marked
"fallback:<model>" in their source, counted for status, and sent back to the model."""

from __future__ import annotations

from dreamd.store.interface import Conn
from dreamd.store.state import of_users


def fallback_counts(conn: Conn) -> dict[str, int]:
    """How many rows of each tier the extractive fallback made in a model's place."""
    rows = conn.execute(
        "SELECT 'gist', COUNT(*) FROM summaries WHERE dreamd_source LIKE 'fallback:%' "
        "UNION ALL SELECT 'era', COUNT(*) FROM eras WHERE dreamd_source LIKE 'fallback:%' "
        "UNION ALL SELECT 'profile', COUNT(*) FROM profile "
        "WHERE dreamd_source LIKE 'fallback:%' UNION ALL SELECT 'narrative', COUNT(*) "
        "FROM narrative WHERE dreamd_source LIKE 'fallback:%' UNION ALL "
        "SELECT 'fact', COUNT(*) FROM facts WHERE origin LIKE 'fallback:%' "
        "AND replaced_by IS NULL").fetchall()
    return {kind: int(n) for kind, n in rows if n}


# Sessions whose gist the fallback made before a time, not already going back.
_DUE = ("FROM dreamd_sessions WHERE summarized_id > 0 AND session_id IN (SELECT session_id "
        "FROM summaries WHERE dreamd_source LIKE 'fallback:%' AND created_at < ?)")


def fallback_gists_due(conn: Conn, made_before: str, users: list[str] | None = None) -> int:
    """How many gists the fallback made before `made_before` (of `users`; None: anyone's)
    wait to go back."""
    where, params = of_users("user_id", users)
    row = conn.execute(f"SELECT COUNT(*) {_DUE}{where}", (made_before, *params)).fetchone()
    return int(row[0]) if row else 0


def send_back(conn: Conn, made_before: str, users: list[str] | None = None) -> int:
    """Inside a write: those gists go back to the model: their session's mark returns to
    the start, and the gist stays until the new one replaces it. Returns how many.
    Sessions are changed one by one in the order of their ids, the order every write of
    several sessions takes, so that two such writes never wait on each other in a ring."""
    where, params = of_users("user_id", users)
    due = [(r[0],) for r in conn.execute(
        f"SELECT session_id {_DUE}{where} ORDER BY session_id", (made_before, *params))]
    conn.executemany("UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 "
                     "WHERE session_id = ?", due)
    return len(due)

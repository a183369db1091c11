"""Rows the extractive fallback made where a model's answers were rejected: marked
"fallback:<model>" in their source, counted for status, and sent back to the model."""

from __future__ import annotations

from dreamd.store.interface import Conn


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


def fallback_gists_due(conn: Conn, made_before: str) -> int:
    """How many gists the fallback made before `made_before` wait to go back."""
    row = conn.execute(f"SELECT COUNT(*) {_DUE}", (made_before,)).fetchone()
    return int(row[0]) if row else 0


def send_back(conn: Conn, made_before: str) -> int:
    """Inside a write: those gists go back to the model: their session's mark returns to
    the start, and the gist stays until the new one replaces it. Returns how many."""
    return conn.execute(
        "UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 WHERE "
        f"session_id IN (SELECT session_id {_DUE})", (made_before,)).rowcount

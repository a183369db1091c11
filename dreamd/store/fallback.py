"""Rows the extractive fallback made where a model's answers were rejected: marked
"fallback:<model>" in their source, counted for status, and sent back to the model."""

from __future__ import annotations

from dreamd.store.interface import Conn


def fallback_counts(conn: Conn) -> dict[str, int]:
    """How many rows of each tier the extractive fallback made in a model's place."""
    rows = conn.execute(
        "SELECT 'gists', COUNT(*) FROM summaries WHERE dreamd_source LIKE 'fallback:%' "
        "UNION ALL SELECT 'eras', COUNT(*) FROM eras WHERE dreamd_source LIKE 'fallback:%' "
        "UNION ALL SELECT 'profiles', COUNT(*) FROM profile "
        "WHERE dreamd_source LIKE 'fallback:%' UNION ALL SELECT 'narratives', COUNT(*) "
        "FROM narrative WHERE dreamd_source LIKE 'fallback:%' UNION ALL "
        "SELECT 'facts', COUNT(*) FROM facts WHERE origin LIKE 'fallback:%' "
        "AND replaced_by IS NULL").fetchall()
    return {kind: int(n) for kind, n in rows if n}


def retry_fallback_gists(conn: Conn, made_before: str, users: list[str] | None) -> int:
    """Inside a write: sessions whose gist the fallback made before `made_before` are
    summarized afresh by the model (their mark goes back to the start; the gist stays
    until the new one replaces it). Returns how many."""
    scope, args = "", [made_before]
    if users is not None:
        scope = f" AND user_id IN ({', '.join('?' * len(users))})"
        args += users
    return conn.execute(
        "UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 WHERE "
        "session_id IN (SELECT session_id FROM summaries WHERE dreamd_source LIKE "
        f"'fallback:%' AND created_at < ?{scope}) AND summarized_id > 0", args).rowcount

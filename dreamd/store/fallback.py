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


def retry_fallback_gists(conn: Conn, made_before: str, write: bool) -> int:
    """Sessions whose gist the fallback made before `made_before`; with `write` (inside a
    write), sent back to the model: their mark returns to the start, and the gist stays
    until the new one replaces it. Returns how many."""
    made = ("SELECT session_id FROM summaries WHERE dreamd_source LIKE 'fallback:%' "
            "AND created_at < ?")
    if not write:
        row = conn.execute(f"SELECT COUNT(*) FROM ({made}) AS due", (made_before,)).fetchone()
        return int(row[0]) if row else 0
    return conn.execute(
        "UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 WHERE "
        f"session_id IN ({made}) AND summarized_id > 0", (made_before,)).rowcount

"""What a memory file must look like after crashes and a clean pass: SQLite's own check,
every turn the app committed there once, each consolidated exactly once. Shared by the
kill -9 tests and the soak benchmark."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def problems(db: Path, live_ids: list[int], live_prefix: str = "live-") -> list[str]:
    """What is wrong with the file at `db` (nothing: []). `live_ids` are the ids the app
    reported committed, in sessions named `live_prefix`…."""
    conn = sqlite3.connect(db)
    try:
        found: list[str] = []
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            found.append(f"integrity_check: {integrity}")
        live = {r[0] for r in conn.execute("SELECT id FROM exchanges WHERE session_id LIKE ?",
                                           (f"{live_prefix}%",))}
        if lost := set(live_ids) - live:
            found.append(f"{len(lost)} turns the app committed are missing")
        if live - set(live_ids):
            found.append(f"{len(live - set(live_ids))} turns appear that the app did not "
                         "commit")
        last = dict(conn.execute("SELECT session_id, MAX(id) FROM exchanges GROUP BY session_id"))
        gists = dict(conn.execute("SELECT session_id, last_exchange_id FROM summaries"))
        if gists != last:
            found.append(f"{len(set(gists.items()) ^ set(last.items()))} sessions' gists do "
                         "not end at their last turn")
        tally = dict(conn.execute("SELECT session_id, turns FROM dreamd_sessions"))
        counts = dict(conn.execute(
            "SELECT session_id, COUNT(*) FROM exchanges GROUP BY session_id"))
        if tally != counts:
            found.append("the tally counts a turn twice or misses one")
        vectors, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT exchange_id) FROM "
                                         "dreamd_exchange_vectors").fetchone()
        total = conn.execute("SELECT COUNT(*) FROM exchanges").fetchone()[0]
        if not vectors == distinct == total:
            found.append(f"{vectors} vectors for {distinct} turns of {total}")
        if conn.execute("SELECT COUNT(*) FROM summaries WHERE content = ''").fetchone()[0]:
            found.append("an empty gist")
        return found
    finally:
        conn.close()

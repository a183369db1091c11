"""A memory file as a chat app makes one: the core tables in WAL mode, turns written as
plain text. For the demo (which stands in for a chat app) and nothing of dreamd's own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from dreamd.store.interface import Conn
from dreamd.store.sqlite import driver
from dreamd.store.sqlite.schema import CORE_TABLES


@contextlib.contextmanager
def created(path: Path, mark: str | None = None) -> Iterator[Conn]:
    """A new file with the core tables, in WAL mode; `mark` names a table that says who
    made it. Yields the app's connection (autocommit) and closes it."""
    conn = driver.open_file(str(path), busy_timeout_ms=5000)
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute(CORE_TABLES)  # apsw runs every statement of a script
        if mark is not None:
            conn.execute(f'CREATE TABLE "{mark}" (made_at TEXT NOT NULL)')
            conn.execute(f"INSERT INTO \"{mark}\" VALUES (datetime('now'))")
        yield conn
    finally:
        conn.close()


def has_mark(path: Path, mark: str) -> bool:
    """Whether the file at `path` carries the table `mark` (read-only, never creating)."""
    try:
        conn = driver.open_file(f"{path.resolve().as_uri()}?mode=ro", busy_timeout_ms=5000,
                                read_only=True)
    except driver.Error:
        return False
    try:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (mark,)).fetchone() is not None
    except driver.Error:
        return False
    finally:
        conn.close()


def write_sessions(conn: Conn,
                   sessions: list[tuple[str, str, list[tuple[str, str, str]]]]) -> int:
    """(session, name, [(role, content, created_at)]) in one transaction, as a chat app
    writes them: plain text, no embeddings. Returns the turns written."""
    count = 0
    conn.execute("BEGIN IMMEDIATE")
    for session_id, name, turns in sessions:
        conn.execute("INSERT OR IGNORE INTO sessions (id, name, created_at) VALUES (?, ?, ?)",
                     (session_id, name, turns[0][2] if turns else ""))
        conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                         "VALUES (?, ?, ?, ?)",
                         [(session_id, role, content, at) for role, content, at in turns])
        count += len(turns)
    conn.execute("COMMIT")
    return count

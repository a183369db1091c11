"""The statements SQLite spells its own way (see `interface.Dialect`); every SQLite
connection dreamd opens carries `SQLITE`."""

from __future__ import annotations

from typing import Any


class SqliteDialect:
    words_key = "rowid"  # FTS5's own row id is the turn's id

    def column_required(self, conn: Any, table: str, column: str) -> bool:
        rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
        return any(r[1] == column and r[3] for r in rows)

    def require_turns(self, conn: Any) -> None:
        """SQLite names a missing table in the statement's own error."""

    def search_words(self, conn: Any, words: list[str], limit: int, scope: str,
                     scope_params: tuple[str, ...]) -> dict[int, float]:
        query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = conn.execute(
            "SELECT f.rowid, -bm25(dreamd_fts) FROM dreamd_fts f "
            f"JOIN exchanges e ON e.id = f.rowid WHERE dreamd_fts MATCH ? AND {scope} "
            "ORDER BY bm25(dreamd_fts) LIMIT ?", (query, *scope_params, limit)).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    def next_seq(self, conn: Any) -> int:
        """A row of dreamd_state: one writer at a time reads and moves it."""
        row = conn.execute("SELECT value FROM dreamd_state WHERE key = 'seq'").fetchone()
        seq = int(row[0] if row and row[0] else 0) + 1
        conn.execute("INSERT INTO dreamd_state (key, value) VALUES ('seq', ?) "
                     "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(seq),))
        return seq

    def readable(self, conn: Any, newest: int) -> int:
        """SQLite hands out ids under its write lock: every id a reader sees is final."""
        return newest


SQLITE = SqliteDialect()

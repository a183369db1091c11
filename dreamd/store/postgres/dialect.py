"""The statements PostgreSQL spells its own way (see `interface.Dialect`), and the marks
psycopg takes for dreamd's `?` (`translate`); every PostgreSQL transaction dreamd opens
carries `POSTGRESQL`."""

from __future__ import annotations

import functools
import re
from typing import Any

from dreamd.errors import NotMigrated

_MARKS = re.compile(r"'(?:[^']|'')*'|\?(\d*)|%")


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> tuple[str, bool]:
    """qmark SQL in psycopg's marks: `?` → `%s`, `?N` → `%(pN)s`, a literal `%` doubled.
    Returns the text and whether it used numbered marks."""
    numbered = False

    def mark(m: re.Match[str]) -> str:
        nonlocal numbered
        text = m.group(0)
        if text.startswith("'"):
            return text.replace("%", "%%")
        if text == "%":
            return "%%"
        if m.group(1):
            numbered = True
            return f"%(p{m.group(1)})s"
        return "%s"

    return _MARKS.sub(mark, sql), numbered


def bound(numbered: bool, parameters: Any) -> Any:
    """The parameters as `translate`'s text takes them: by name where it numbered them."""
    if parameters is None:
        return ()
    if numbered:
        return {f"p{i}": v for i, v in enumerate(parameters, start=1)}
    return parameters


class PgDialect:
    words_key = "id"  # the words table's own column

    def column_required(self, conn: Any, table: str, column: str) -> bool:
        row = conn.execute(
            "SELECT is_nullable FROM information_schema.columns WHERE table_name = ? "
            "AND column_name = ? AND table_schema = current_schema()", (table, column)
        ).fetchone()
        return row is not None and row[0] == "NO"

    def require_turns(self, conn: Any) -> None:
        if conn.execute("SELECT to_regclass('exchanges')").fetchone()[0] is None:
            raise NotMigrated("there is no exchanges table here: neither the chat app nor "
                              "dreamd has set this database up (dreamd --db URL --force does)")

    def search_words(self, conn: Any, words: list[str], limit: int, scope: str,
                     scope_params: tuple[str, ...]) -> dict[int, float]:
        # Each word a quoted lexeme, stemmed as the index is; ts_rank_cd stands in for
        # BM25 (z-fusion uses only the order and spread of the scores).
        terms = " | ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "'"
                           for w in words)
        rows = conn.execute(
            "SELECT f.id, ts_rank_cd(f.words, q, 1) AS r FROM dreamd_fts f "
            "JOIN exchanges e ON e.id = f.id, to_tsquery('english', ?) AS q "
            f"WHERE f.words @@ q AND {scope} ORDER BY r DESC, f.id LIMIT ?",
            (terms, *scope_params, limit)).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    def next_seq(self, conn: Any) -> int:
        """A sequence: writers of different users draw from it at once, where a row would
        have them wait for each other's commit. Its numbers are not drawn in commit
        order, but one user's rows are written under that user's lock (`ids.user_key`),
        so each user's rows commit in the order of their numbers; a reader of everyone's
        (reflect's marks) reads the counter while no write runs (`Store.write` alone)."""
        return int(conn.execute("SELECT nextval('dreamd_seq')").fetchone()[0])

    def readable(self, conn: Any, newest: int) -> int:
        """Up to the settled id the transaction's store has seen (`PgStore.settle_turns`)."""
        return min(newest, int(conn.settled))


POSTGRESQL = PgDialect()

"""The chat app's side of a store, on either engine: its own connection, its own short
writes, as an app in another process makes them."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Any

from dreamd.store.postgres.dialect import translate
from dreamd.store.postgres.schema import CORE_TABLES as PG_CORE_TABLES
from dreamd.url import is_url


class App:
    def __init__(self, target: str) -> None:
        self.target = target
        self.pg = is_url(target)
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(target, autocommit=True)
        else:
            self.conn = sqlite3.connect(target, isolation_level=None, timeout=10)
            self.conn.execute("PRAGMA journal_mode=WAL")

    def create_tables(self) -> None:
        """The core tables, as the app creates them before dreamd ever runs."""
        if self.pg:
            for statement in PG_CORE_TABLES.split(";\n"):
                self.conn.execute(statement)
        else:
            from dreamd.store.sqlite.schema import CORE_TABLES

            self.conn.executescript(CORE_TABLES)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        if self.pg:
            text, _ = translate(sql)
            return self.conn.execute(text, params)
        return self.conn.execute(sql, params)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.execute(sql, params).fetchall()]

    def value(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def session(self, session_id: str, user: str, at: str = "2024-03-01T10:00:00+00:00"
                ) -> None:
        self.execute("INSERT INTO sessions (id, name, created_at, user_id) VALUES (?, ?, ?, ?)",
                     (session_id, session_id, at, user))

    def say(self, session_id: str, turns: list[tuple[str, str]],
            at: str | list[str] = "2024-03-01T10:00:00+00:00") -> list[int]:
        """Turns in one transaction (at one time, or each at its own); their ids."""
        times = at if isinstance(at, list) else [at] * len(turns)
        ids = []
        self.execute("BEGIN")
        for (role, content), when in zip(turns, times, strict=True):
            ids.append(int(self.value(
                "INSERT INTO exchanges (session_id, role, content, created_at) "
                "VALUES (?, ?, ?, ?) RETURNING id", (session_id, role, content, when))))
        self.execute("COMMIT")
        return ids

    def turns(self, session_id: str, texts: list[str], start: datetime,
              roles: tuple[str, str] = ("user", "assistant")) -> list[int]:
        """Turns a minute apart from `start`, the roles taking turns, in one transaction."""
        return self.say(session_id, [(roles[i % 2], text) for i, text in enumerate(texts)],
                        [(start + timedelta(minutes=i)).isoformat() for i in range(len(texts))])

    def close(self) -> None:
        self.conn.close()

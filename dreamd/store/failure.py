"""A store engine's exception as dreamd's own error: each engine words its own."""

from __future__ import annotations

import sys

from dreamd.errors import DreamdError, StoreAway
from dreamd.store.postgres.store import engine_failure as pg_failure
from dreamd.store.postgres.store import server_away
from dreamd.store.sqlite.driver import Error as SqliteError
from dreamd.store.sqlite.store import sqlite_failure


def engine_errors() -> tuple[type[Exception], ...]:
    """The engines' own exception classes, for code that must tell a store fault from a
    bug (`except engine_errors():`). psycopg's once it is loaded: no PostgreSQL error can
    come before, and a SQLite user's command never pays for importing it."""
    psycopg = sys.modules.get("psycopg")
    return (*SqliteError, psycopg.Error) if psycopg is not None else tuple(SqliteError)


def engine_failure(exc: BaseException) -> DreamdError | None:
    """`StoreBusy` for a lock held past its timeout, `StoreAway` for a server that did not
    answer, `StoreError` with the engine's words for anything else it raised, None when
    `exc` is not an engine's."""
    return sqlite_failure(exc) or pg_failure(exc)


def store_away(exc: BaseException) -> bool:
    """Whether `exc` says the store's server was away (down, restarting, the connection
    lost): no fault of the work in hand, which a pass once it is back does again."""
    return isinstance(exc, StoreAway) or server_away(exc)  # a file is never away

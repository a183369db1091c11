"""The SQLite libraries under dreamd's connections to a memory file, and the one module
that knows them.

`BUNDLED` is apsw's: its wheels carry their own SQLite (3.51.3 or later), so a plain
`pip install` runs dreamd on a library without the WAL-reset bug whatever the system
has. (Python's `sqlite3` module uses the system's library, and Debian 12's 3.40.1
carries the bug; the DB-API modules that bundle an amalgamation, pysqlite3-binary and
sqlean.py, ship 3.51.1 and 3.50.4 today: both affected.) dreamd's own processes — the
daemon, workers, every command — run on it.

`SYSTEM` is Python's `sqlite3`: the library a Python chat app's own connection runs. A
`Memory` inside the app's process uses it by default, because two copies of SQLite in
one process do not see each other's locks: an app's BEGIN IMMEDIATE and the other
copy's would both be granted, and the other copy closing its file would drop the
app's locks (sqlite.org/howtocorrupt.html, "multiple copies of SQLite linked into the
same application"; tests/test_sqlite_library.py shows both).

The rest of the store speaks DB-API 2.0 (qmark) to either: `sqlite3.Connection` as it
is, apsw through `SqliteConn`, the small part of that API the store uses. Neither opens
a transaction implicitly, and a connection may be used from any thread (SQLite's own
mutex serializes the calls).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import apsw

from dreamd.store.sqlite.dialect import SQLITE

BUNDLED = "bundled"
SYSTEM = "system"
CHECKPOINT_PASSIVE = apsw.SQLITE_CHECKPOINT_PASSIVE
LIBRARIES = (BUNDLED, SYSTEM)

Error: tuple[type[Exception], ...] = (apsw.Error, sqlite3.Error)


def library_version(library: str = BUNDLED) -> str:
    """The SQLite release a library runs, e.g. "3.54.1"."""
    return str(apsw.sqlite_lib_version()) if library == BUNDLED else sqlite3.sqlite_version


def is_busy(exc: BaseException) -> bool:
    """A lock held by another connection past the busy timeout."""
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return True
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc))


def is_not_a_database(exc: BaseException) -> bool:
    return isinstance(exc, apsw.NotADBError) or (
        isinstance(exc, sqlite3.DatabaseError) and "file is not a database" in str(exc))


# SQLite's WAL hook: (the library's connection, the database's name, the WAL's pages)
# -> SQLITE_OK.
WalHook = Callable[[Any, str, int], int]


class Raw(Protocol):
    """A connection as `connect.SqliteStore` uses it: `SqliteConn` or `sqlite3.Connection`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, parameters: Any, /) -> Any: ...
    @property
    def in_transaction(self) -> bool: ...
    @property
    def total_changes(self) -> int: ...
    def on_commit(self, hook: WalHook) -> bool:
        """Call `hook` after each commit has written its frames to the WAL, in SQLite's
        automatic checkpoint's place; False where the library offers no such hook (then
        SQLite's own checkpoint stays)."""
    def close(self) -> None: ...


class SystemConn(sqlite3.Connection):
    """A `sqlite3` connection that says which dialect it speaks."""

    dialect = SQLITE

    def on_commit(self, hook: WalHook) -> bool:
        return False  # Python's sqlite3 has no WAL hook


class Rows:
    """What a statement returns (DB-API 2.0): its rows, and for an INSERT, UPDATE or
    DELETE the rows it changed (`rowcount`) and the last row it inserted."""

    __slots__ = ("_cursor", "lastrowid", "rowcount")

    def __init__(self, cursor: apsw.Cursor, rowcount: int, lastrowid: int | None) -> None:
        self._cursor = cursor
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


class SqliteConn:
    """One apsw connection as the store's functions use it."""

    dialect = SQLITE

    def __init__(self, raw: apsw.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: Any = None, /) -> Rows:
        # apsw steps a statement as far as its first row: an INSERT, UPDATE or DELETE
        # (without RETURNING) has finished by now, so its counts are final.
        cursor = self.raw.execute(sql, parameters)
        return Rows(cursor, self.raw.changes(), self.raw.last_insert_rowid())

    def executemany(self, sql: str, parameters: Any, /) -> Rows:
        before = self.raw.total_changes()
        rows = list(parameters)
        cursor = self.raw.executemany(sql, rows) if rows else self.raw.cursor()
        return Rows(cursor, self.raw.total_changes() - before, None)

    @property
    def in_transaction(self) -> bool:
        return bool(self.raw.in_transaction)

    @property
    def total_changes(self) -> int:
        """Rows changed since the connection opened, triggers and FTS5's own included."""
        return int(self.raw.total_changes())

    def on_commit(self, hook: WalHook) -> bool:
        self.raw.set_wal_hook(hook)
        return True

    def close(self) -> None:
        self.raw.close()


def open_file(name: str, busy_timeout_ms: int, read_only: bool = False,
              library: str = BUNDLED) -> Raw:
    """A connection to the file `name` (read-only: a `file:` URI with `mode=ro`) on
    `library`, with `busy_timeout_ms` as its busy timeout. Opening reads nothing yet:
    whether the file is an SQLite database shows at the first statement."""
    if library == SYSTEM:
        conn = sqlite3.connect(name, uri=read_only, isolation_level=None,
                               timeout=busy_timeout_ms / 1000, check_same_thread=False,
                               factory=SystemConn)
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        return conn
    if read_only:
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    else:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    raw = apsw.Connection(name, flags=flags)
    raw.set_busy_timeout(int(busy_timeout_ms))
    # apsw's SQLite is built with blocking locks, which a busy timeout turns on: dreamd
    # would wait for the write lock in the kernel and take it the moment it is free,
    # while the app's library polls between sleeps, so the app would lose every race
    # (its INSERT p99 during an 8-worker pass rose from +5 ms to +15 ms, measured). With
    # them off, dreamd polls as the app does, and the app's writes keep their latency.
    raw.setlk_timeout(0, 0)
    return SqliteConn(raw)

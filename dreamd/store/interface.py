"""The store's interface: what the rest of dreamd may know about where memory lives.

Above `dreamd.store`, code opens a `Store`, takes a `Conn` from `read()` or `write()` and
hands it to the named functions of the module that owns the query (`store.turns` the
app's tables and the tally, `store.tiers` the derived tiers, `store.vectors` vectors and
the words index, `store.facts`, `store.pending`, `store.queues`, `store.runs`,
`store.state`); it never runs a statement of its own, never sees an engine's row type,
never names an engine's exceptions (it asks `store.failure.engine_failure`) and never
asks which engine it holds (a `Store` says what it can do). SQLite
(`sqlite.store.SqliteStore`) is the embedded engine, PostgreSQL (`postgres.store.PgStore`)
the shared one, each in a package of its own; the few statements they spell apart live
there behind its `Dialect`, and `opening` is the one place that picks an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from threading import Event, Lock
from typing import Any, Protocol


class Cursor(Protocol):
    """What a statement returns (DB-API 2.0)."""

    @property
    def rowcount(self) -> int: ...
    @property
    def lastrowid(self) -> int | None: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """An open transaction, as the store's functions use it (DB-API 2.0, qmark style).

    Only modules under `dreamd.store` call its methods."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Any, /) -> Cursor: ...


@dataclass
class WriteLockTimes:
    """How long dreamd held the file's write lock: the time the chat app may have waited.

    Measured from BEGIN IMMEDIATE granted to COMMIT (or ROLLBACK) returned. Now and then
    a COMMIT also runs SQLite's automatic checkpoint after releasing the lock, so this is
    an upper bound."""

    writes: int = 0
    held: float = 0.0  # seconds
    longest: float = 0.0
    most_rows: int = 0  # rows one transaction wrote, at most
    waited: float = 0.0  # seconds spent getting the lock (PostgreSQL: the write's locks)
    # A pass's connections count together (see `Store.sibling`).
    _lock: Lock = field(default_factory=Lock, repr=False, compare=False)

    def wait(self, seconds: float) -> None:
        with self._lock:
            self.waited += seconds

    def add(self, seconds: float, rows: int = 0) -> None:
        with self._lock:
            self.writes += 1
            self.held += seconds
            self.longest = max(self.longest, seconds)
            self.most_rows = max(self.most_rows, rows)

    def as_dict(self) -> dict[str, float]:
        return {"writes": self.writes, "held_ms": round(self.held * 1000, 1),
                "longest_ms": round(self.longest * 1000, 2), "most_rows": self.most_rows,
                "waited_ms": round(self.waited * 1000, 1)}


class Store(Protocol):
    """One connection to the memory store with dreamd's rules attached: every read is one
    snapshot, every write one short transaction that commits or rolls back whole."""

    engine: str  # "sqlite" or "postgresql"
    where: str  # what to show a person: the file's path or the server's URL (no password)
    read_only: bool
    lock_times: WriteLockTimes
    # Entered around each write, outside its transaction: jobs side by side set it to
    # the pass's write gate, so that no other thread of the pass computes while one
    # writes (see dreamd.backends.write_gate).
    quiet: Callable[[], AbstractContextManager[object]]
    # What the engine can do, so that no caller asks which engine it is:
    # several dreamd processes share it, each claiming users under leases
    # (dreamd.store.leases); False: one dreamd at a time, under the instance lock.
    shared: bool

    @property
    def in_transaction(self) -> bool: ...
    def read(self) -> AbstractContextManager[Conn]: ...
    def write(self, *keys: str, alone: bool = False) -> AbstractContextManager[Conn]:
        """A short transaction of dreamd's writes, commit on success, roll back on error.

        `keys` name what it changes that another writer may change too (`ids.user_key`:
        one user's memory; see the store's docs for the rest), `alone` that it must see no
        other dreamd write running (forget, an import, moving a session to another user).
        On a shared engine writes wait only for one that names a key they name, or for
        one alone; SQLite lets one writer in at a time whatever they name."""
    def peek(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read, on a snapshot of its own: for a look that needs no other
        statement's view of the store (whether anything waits). On PostgreSQL the read
        transaction travels with the statement, one round trip where `read` takes three;
        a caller that reads twice uses `read`."""
    def changes(self) -> object | None:
        """A mark that is the same at two calls only if nothing was committed to the store
        in between, by this connection or any other: a reader whose data stands as it
        was at the last mark reads nothing. None where the engine cannot tell without a
        read of its own (PostgreSQL): then the reader reads."""
    def take(self, conn: Conn, key: str) -> bool:
        """Inside a write: `key`'s lock if no other write holds it, else False at once;
        for work any one of many workers may do, so that the others go on instead of
        waiting to find it done (SQLite: always True, its writer is alone)."""
    def settle_turns(self, wait: float = 0.0) -> int:
        """Look again at which of the app's turns are final (committed, no smaller id still
        to come), waiting up to `wait` seconds for those committed before the call; the
        turns' watermarks never move past what this returns. (SQLite: always all.)"""
    def sibling(self) -> Store | None:
        """Another connection to the same store, for another thread of the same pass
        (jobs side by side, dreamd.dream.lanes): its writes count in this one's
        `lock_times`, and it reads the turns this one has settled; the caller closes it.
        None where no second connection can be opened."""
    def checkpoint_log(self) -> None:
        """After a batch of writes: fold the write-ahead log into the store without
        waiting for anyone (SQLite: a passive checkpoint)."""
    def purge_log(self, wait: bool = True) -> bool:
        """Leave no copy of erased rows in the write-ahead log; True when none is left."""
    def engine_info(self) -> dict[str, Any]:
        """The engine's version and known faults, for `status`."""
    def merge_words(self) -> bool:
        """Inside a write: merge a step of the words index, so no old part of it keeps an
        erased turn's words; True while there is more to merge (PostgreSQL: nothing to
        merge, its index drops an entry with the row)."""
    def tidy_words(self) -> bool:
        """Outside a transaction: a short step, in a write of its own, of merging the
        parts of the words index that adding turns leaves; True when it merged some
        (PostgreSQL: nothing to merge, and no write)."""
    def vacuum(self, tables: Sequence[str]) -> None:
        """Outside a transaction: leave no stale copy of a deleted row in live storage
        (SQLite rewrites the whole file; PostgreSQL vacuums `tables`)."""
    def listen(self, wake: Event, stop: Event,
               on_change: Callable[[str | None], None]) -> bool:
        """Set `wake` whenever the app writes turns, until `stop` is set, from a thread of
        its own; False when the engine cannot tell (then the caller looks itself).
        `on_change` is told the error when listening stops (the server went away), and
        None once it listens again (and `wake` is set: turns may have come meanwhile)."""
    def close(self) -> None: ...


class Dialect(Protocol):
    """The few statements the two engines spell apart, kept with their engine
    (store/sqlite/dialect.py, store/postgres/dialect.py); every connection carries its
    own."""

    words_key: str  # the words index's turn-id column

    def column_required(self, conn: Any, table: str, column: str) -> bool: ...
    def require_turns(self, conn: Any) -> None:
        """Raise NotMigrated where the app's turns table is not there to read."""
    def search_words(self, conn: Any, words: list[str], limit: int, scope: str,
                     scope_params: tuple[str, ...]) -> dict[int, float]: ...
    def next_seq(self, conn: Any) -> int:
        """The next number of the counter that orders derived rows (inside a write)."""
    def readable(self, conn: Any, newest: int) -> int:
        """Of the turns up to `newest`, the newest dreamd may read: those whose ids are
        final (see `Store.settle_turns`)."""


def dialect(conn: Conn) -> Dialect:
    """The dialect of the engine a transaction is on."""
    spoken: Dialect = conn.dialect  # type: ignore[attr-defined]
    return spoken

"""The PostgreSQL engine: the same store, shared by many dreamd processes and machines.

The store's functions are written once, in the SQL both engines speak, with `?` marks;
`PgConn` hands them to psycopg with its own marks. Two things differ in kind, not in
words, and live here:

- **Writes.** SQLite lets one writer in at a time (BEGIN IMMEDIATE). Here a fleet of
  workers writes at once, and a write waits only for those that change what it changes.
  Each write transaction first takes, in the same round trip as its BEGIN, the fleet's
  advisory lock in shared mode (in exclusive mode for a write `alone`: forget, an
  import, a session moved to another user) and an exclusive advisory lock per key it
  names (`ids.user_key`: one user's memory), in one order, so two writes cannot wait on
  each other in a ring. What users share is written by single statements that check
  and change a row at once (see `Store.write`, and "What protects each write" in
  docs/how-to/postgresql.md). The locks end with the transaction: a pooler or a reconnect
  cannot leave one behind, and the chat app's transactions never take them.
- **Which turns are final.** SQLite hands out ids under its write lock, so every id
  below the newest one a reader sees is already committed. PostgreSQL hands them out
  from a sequence before the inserting transaction commits: id 100 may commit after 101.
  A watermark moved past 101 would skip 100 for ever. So dreamd reads turns only up to
  the *settled* id: the newest id it saw at some moment, once every transaction that was
  running then has ended (`Settled`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dreamd.errors import StoreAway, StoreBusy, StoreError
from dreamd.store.interface import WriteLockTimes
from dreamd.store.postgres.dialect import POSTGRESQL, bound, translate
from dreamd.url import shown

if TYPE_CHECKING:
    import psycopg

# The classes (first halves) of dreamd's transaction-scoped advisory locks: the fleet's
# lock, shared by every write and taken alone by a few, and the locks of named keys.
# The second half is a hash of the schema (and the key), so that two schemas' dreamds
# in one database do not wait on each other.
FLEET_LOCK = 0x64726561  # "drea"
KEY_LOCK = 0x6D656D6F  # "memo"

# What the migration's trigger NOTIFYs on when the app inserts turns.
CHANNEL = "dreamd_turns"
# Seconds between tries to LISTEN again after the connection was lost: the first, and
# the most it doubles to while the server stays away.
LISTEN_RETRY = (1.0, 5.0)


@dataclass
class Settled:
    """Which turn ids are final: the newest id seen at a moment, once every transaction
    that could still hold a smaller id has ended.

    A transaction may draw an id from the sequence a moment before it gets its
    transaction id, so a sighting is trusted only after `delay`: then a later snapshot's
    xmax is above every such transaction, and once the oldest running transaction is
    past that xmax they have all ended."""

    delay: float = 0.2
    newest: int = 0
    sightings: list[tuple[int, float, int | None]] = field(default_factory=list)

    def see(self, top: int, xmin: int, xmax: int, now: float) -> int:
        """Fold in one look (the newest visible id and the snapshot's bounds); returns
        the settled id."""
        if top > self.newest and (not self.sightings or top > self.sightings[-1][0]):
            self.sightings.append((top, now, None))
        kept: list[tuple[int, float, int | None]] = []
        for seen, at, after in self.sightings:
            if after is None and now - at >= self.delay:
                after = xmax
            if after is not None and xmin >= after:
                self.newest = max(self.newest, seen)
            else:
                kept.append((seen, at, after))
        self.sightings = [s for s in kept if s[0] > self.newest]
        return self.newest


class PgConn:
    """One open transaction on PostgreSQL, as the store's functions use it."""

    dialect = POSTGRESQL

    def __init__(self, raw: psycopg.Connection[Any], store: PgStore) -> None:
        self.raw = raw
        self.store = store

    def execute(self, sql: str, parameters: Any = None, /) -> Any:
        text, numbered = translate(sql)
        return self.raw.execute(text, bound(numbered, parameters))

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        text, numbered = translate(sql)
        cur = self.raw.cursor()
        rows = [bound(numbered, p) for p in parameters]
        if rows:
            cur.executemany(text, rows)
        return cur

    @property
    def settled(self) -> int:
        return self.store.settled.newest


class PgStore:
    """The PostgreSQL engine: one psycopg connection with dreamd's rules attached."""

    engine = "postgresql"
    shared = True  # workers on many machines, each claiming users (dreamd.store.leases)

    def __init__(self, raw: psycopg.Connection[Any], url: str, schema: str,
                 read_only: bool = False,
                 reopen: Callable[[], psycopg.Connection[Any]] | None = None,
                 busy_timeout_ms: int = 5000) -> None:
        self.raw = raw
        self.url = url
        self.schema = schema
        self.busy_timeout_ms = busy_timeout_ms
        # Set in every transaction: behind a pooler in transaction mode, the next one may
        # run on another server connection, with that connection's settings.
        self._local = (f"SET LOCAL search_path TO {quoted_name(schema)}; "
                       f"SET LOCAL lock_timeout TO '{int(busy_timeout_ms)}ms'")
        self.where = shown(url) + ("" if schema == "public" else f" (schema {schema})")
        self.read_only = read_only
        self.lock_times = WriteLockTimes()
        self.quiet: Callable[[], contextlib.AbstractContextManager[object]] = \
            contextlib.nullcontext
        self.settled = Settled()
        self._reopen = reopen
        self._conn = PgConn(raw, self)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        # A dropped connection's status is UNKNOWN: no transaction is open on it any more.
        return self.raw.info.transaction_status in (
            TransactionStatus.ACTIVE, TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def fresh(self) -> psycopg.Connection[Any]:
        """The connection, opened again first if the server closed it (a restart, a
        failover, a pooler's idle timeout). Called only outside a transaction: one that
        was open when the connection dropped has failed with it, and its work is done
        again from its start, never carried on outside a transaction."""
        if (self.raw.closed or self.raw.broken) and self._reopen is not None:
            with contextlib.suppress(Exception):
                self.raw.close()
            self.raw = self._reopen()
            self._conn = PgConn(self.raw, self)
        return self.raw

    def begin(self, statement: str, kind: str, then: str = "") -> None:
        """Begin a transaction, with dreamd's schema and lock timeout set inside it, and
        run `then` in it; one round trip. Nothing is left open when that fails (a lock
        not granted within the lock timeout)."""
        self.fresh()
        if self.in_transaction:
            raise StoreError(f"internal: nested {kind} transaction")
        try:
            self.first(f"{statement}; {self._local}" + (f"; {then}" if then else ""))
        except BaseException:
            if self.in_transaction:
                self.raw.execute("ROLLBACK")
            raise

    def first(self, statement: str) -> Any:
        """Run a statement outside any transaction. A connection the server closed while
        it sat idle is only found out by using it: then it is opened again and the
        statement run on the new one, once (nothing had been done on the old)."""
        return self.first_with(statement, None)

    def first_with(self, statement: str, parameters: Any) -> Any:
        """`first`, with parameters bound into the statement."""
        try:
            return self.fresh().execute(statement, parameters)
        except _psycopg().OperationalError:
            if self._reopen is None or not (self.raw.closed or self.raw.broken):
                raise
            return self.fresh().execute(statement, parameters)

    def peek(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """A read-only transaction begun, read and ended by one message (the statements of
        a simple query run in turn): its rows come back with the others' empty results."""
        text, numbered = translate(sql)
        local = self._local.replace("%", "%%")
        self.fresh()
        if self.in_transaction:
            raise StoreError("internal: peek inside a transaction")
        try:
            cur = self.first_with(f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {local}; "
                                  f"{text}; COMMIT", bound(numbered, tuple(parameters)))
        except BaseException:
            if self.in_transaction:
                self.raw.execute("ROLLBACK")
            raise
        rows: list[Any] = []
        while True:  # the one statement with rows among BEGIN, SET, it and COMMIT
            rows = list(cur.fetchall()) if cur.description is not None else rows
            if not cur.nextset():
                return rows

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PgConn]:
        """A transaction of its own, not behind dreamd's write lock: commit on success,
        roll back on error."""
        self.begin("BEGIN", "plain")
        try:
            yield self._conn
        except BaseException:
            if self.in_transaction:
                self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    def locks(self, keys: Sequence[str], alone: bool) -> str:
        """The statements that take a write's advisory locks: the fleet's lock (shared, or
        exclusive alone), then each key's, in the order of their numbers."""
        fleet = "pg_advisory_xact_lock" if alone else "pg_advisory_xact_lock_shared"
        taken = [f"SELECT {fleet}({FLEET_LOCK}, {lock_number(self.schema)})"]
        taken += [f"SELECT pg_advisory_xact_lock({KEY_LOCK}, {n})"
                  for n in sorted({lock_number(self.schema, key) for key in keys})]
        return "; ".join(taken)

    @contextlib.contextmanager
    def write(self, *keys: str, alone: bool = False) -> Iterator[PgConn]:
        """A short transaction holding the fleet's lock and the locks of `keys` (see the
        module's docs): commit on success, roll back on error."""
        if self.read_only:
            raise StoreError("internal: write on a read-only store")
        with self.quiet():
            asked = time.perf_counter()
            self.begin("BEGIN", "write", then=self.locks(keys, alone))
            locked = time.perf_counter()
            self.lock_times.wait(locked - asked)
            try:
                yield self._conn
            except BaseException:
                if self.in_transaction:
                    self.raw.execute("ROLLBACK")
                self.lock_times.add(time.perf_counter() - locked)
                raise
            self.raw.execute("COMMIT")
            self.lock_times.add(time.perf_counter() - locked)

    def take(self, conn: Any, key: str) -> bool:
        row = self.raw.execute(f"SELECT pg_try_advisory_xact_lock({KEY_LOCK}, "
                               f"{lock_number(self.schema, key)})").fetchone()
        return row is not None and bool(row[0])

    def sibling(self) -> PgStore | None:
        if self.read_only or self._reopen is None:
            return None
        other = PgStore(self._reopen(), self.url, self.schema, reopen=self._reopen,
                        busy_timeout_ms=self.busy_timeout_ms)
        other.lock_times = self.lock_times
        other.settled = self.settled
        return other

    @contextlib.contextmanager
    def read(self) -> Iterator[PgConn]:
        """A read-only transaction on one snapshot; closed on exit."""
        self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "read")
        try:
            yield self._conn
        finally:
            if self.in_transaction:
                self.raw.execute("COMMIT")

    def changes(self) -> None:
        return None  # no mark without a round trip of its own: a refresh reads as before

    def settle_turns(self, wait: float = 0.0) -> int:
        """Look again at which turns are final; with `wait`, keep looking (up to that many
        seconds) until every turn committed before the call is settled."""
        deadline = time.monotonic() + wait
        target: int | None = None
        # One statement outside a transaction: the table is named with its schema.
        look = ("SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
                f"(SELECT COALESCE(MAX(id), 0) FROM {quoted_name(self.schema)}.exchanges) "
                "FROM pg_current_snapshot() AS s")
        while True:
            row = self.first(look).fetchone()
            assert row is not None
            xmin, xmax, top = int(row[0]), int(row[1]), int(row[2])
            target = top if target is None else target  # what was committed at the call
            newest = self.settled.see(top, xmin, xmax, time.monotonic())
            if newest >= target or time.monotonic() >= deadline:
                return newest
            time.sleep(0.02)

    def checkpoint_log(self) -> None:
        """PostgreSQL checkpoints its own log."""

    def purge_log(self, wait: bool = True) -> bool:
        """PostgreSQL's write-ahead log is the server's: dreamd cannot empty it. Erased
        rows leave the tables with VACUUM; their old images leave the log as the server
        recycles its segments."""
        return False

    def engine_info(self) -> dict[str, object]:
        return {"version": self.raw.info.parameter_status("server_version") or "unknown",
                "schema": self.schema}

    def merge_words(self) -> bool:
        return False  # a GIN index drops an entry with its row: no segments to merge

    def tidy_words(self) -> bool:
        return False  # a GIN index has no parts to merge

    def vacuum(self, tables: Sequence[str]) -> None:
        """Frees the erased rows' space for reuse (the server's log keeps their images
        until it recycles its segments)."""
        for table in tables:
            # VACUUM runs outside a transaction: the table is named with its schema.
            self.fresh().execute(f"VACUUM {quoted_name(self.schema)}.{table}")

    def listen(self, wake: threading.Event, stop: threading.Event,
               on_change: Callable[[str | None], None]) -> bool:
        threading.Thread(target=listen_for_turns, name="dreamd-listen", daemon=True,
                         args=(self.url, wake, stop, on_change)).start()
        return True

    def another(self, busy_timeout_ms: int) -> PgStore:
        """A connection of its own to the same database and schema."""
        return connect(self.url, self.schema, busy_timeout_ms)

    def close(self) -> None:
        self.raw.close()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("a PostgreSQL store needs psycopg 3: pip install "
                         "'dreamd[postgresql]'") from None
    return psycopg


# The SQLSTATEs of a server that is not there to answer: a connection exception (class
# 08), a shutdown by an administrator or after a crash, a server starting up or stopping.
# (A client-side loss of the connection has none.)
AWAY_STATES = ("08", "57P01", "57P02", "57P03")


def server_away(exc: BaseException) -> bool:
    """Whether psycopg's `exc` says the server did not answer or dropped the connection
    (down, restarting, failing over, the connection killed), not what it answered."""
    psycopg = sys.modules.get("psycopg")  # no PostgreSQL error comes before it is loaded
    if psycopg is None or not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate or ""
    return not state or state.startswith(AWAY_STATES)


def connection_error(url: str, exc: Exception) -> StoreError:
    """A connection failure in one line: which server, and what it said (`StoreAway`
    when no server answered)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    text = re.sub(r"^(connection (failed|is bad): )?(connection to server .*? failed: )?", "",
                  text)
    text = re.sub(r"^(FATAL|ERROR):\s+", "", text)
    if any("Is the server running" in ln for ln in lines):
        text += " (is the server running, and accepting connections there?)"
    error = StoreAway if server_away(exc) else StoreError
    return error(f"cannot connect to PostgreSQL at {shown(url)}: {text}")


def connect(url: str, schema: str = "public", busy_timeout_ms: int = 5000,
            read_only: bool = False, connect_timeout: int = 10) -> PgStore:
    """Connect with dreamd's settings: autocommit (transactions are explicit), the
    schema first on the search path, statements that wait on a lock give up after the
    busy timeout."""
    psycopg = _psycopg()
    from psycopg.adapt import Loader

    class NumericLoader(Loader):
        """PostgreSQL's SUM of integers is `numeric`; dreamd wants an int (or a float),
        as SQLite gives."""

        def load(self, data: Any) -> Any:
            text = bytes(data).decode()
            return float(text) if "." in text or "e" in text.lower() else int(text)

    def opened() -> Any:
        try:
            raw = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor,
                                  connect_timeout=connect_timeout,
                                  application_name="dreamd")
        except psycopg.Error as exc:
            raise connection_error(url, exc) from None
        raw.adapters.register_loader("numeric", NumericLoader)
        try:
            raw.execute("SELECT set_config('search_path', %s, false), "
                        "set_config('lock_timeout', %s, false)",
                        (quoted_name(schema), f"{int(busy_timeout_ms)}ms"))
        except psycopg.Error as exc:
            raw.close()
            raise StoreError(f"{shown(url)}: {exc}".strip()) from None
        return raw

    return PgStore(opened(), url, schema, read_only=read_only, reopen=opened,
                   busy_timeout_ms=busy_timeout_ms)


def lock_number(schema: str, key: str = "") -> int:
    """A lock's second half: a signed 32-bit hash of the schema and the key, the same in
    every process (two keys that share one merely wait on each other)."""
    n = zlib.crc32(f"{schema}\0{key}".encode())
    return n - (1 << 32) if n >= 1 << 31 else n


def quoted_name(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def engine_failure(exc: BaseException) -> StoreError | None:
    """psycopg's exception as dreamd's error (None when it is not one)."""
    try:
        import psycopg
    except ImportError:
        return None
    if not isinstance(exc, psycopg.Error):
        return None
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return StoreBusy(f"a PostgreSQL lock stayed held past the lock timeout ({text}); "
                         "try again")
    return (StoreAway if server_away(exc) else StoreError)(f"PostgreSQL: {text}")


def listen_for_turns(url: str, wake: threading.Event, stop: threading.Event,
                     on_change: Callable[[str | None], None]) -> None:
    """Until `stop` is set: LISTEN on the channel the migration's trigger NOTIFYs when the
    app inserts turns, and set `wake` on each notification. A lost connection is opened
    again after a pause that grows while the server stays away (the daemon's periodic
    look is the safety net meanwhile); `on_change` hears of the loss once, and of the
    return."""
    psycopg = _psycopg()
    pause, lost = LISTEN_RETRY[0], False
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10,
                                 application_name="dreamd-listen") as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                if lost:
                    pause, lost = LISTEN_RETRY[0], False
                    wake.set()  # turns the app added while nobody listened
                    on_change(None)
                while not stop.is_set():
                    for _ in conn.notifies(timeout=1.0, stop_after=1):
                        wake.set()
        except psycopg.Error as exc:
            if not lost:
                on_change(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
            lost = True
            stop.wait(pause)
            pause = min(2 * pause, LISTEN_RETRY[1])

"""The connection contract with a shared WAL file: dreamd is a guest in it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dreamd.errors import StoreBusy, StoreError
from dreamd.store.interface import WriteLockTimes
from dreamd.store.sqlite import driver
from dreamd.store.sqlite.driver import BUNDLED, SYSTEM, Raw

AUTOCHECKPOINT_PAGES = 1000  # SQLite's default wal_autocheckpoint

# The WAL-reset bug (sqlite.org/wal.html#walresetbug) can corrupt a WAL database when
# two connections write and checkpoint at the same moment — exactly dreamd's setting.
# It is present from 3.7.0 through 3.51.2; fixed in 3.51.3 and backported to 3.44.6
# and 3.50.7.
_WAL_RESET_FIRST = (3, 7, 0)
_WAL_RESET_FIXED = (3, 51, 3)
_WAL_RESET_BACKPORTS = ((3, 44, 6), (3, 50, 7))


def sqlite_version(library: str = BUNDLED) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in driver.library_version(library).split(".")[:3])
    return major, minor, patch


def has_wal_reset_bug(version: tuple[int, int, int]) -> bool:
    """True when this SQLite library version carries the WAL-reset bug."""
    if not (_WAL_RESET_FIRST <= version < _WAL_RESET_FIXED):
        return False
    return not any(version[:2] == fix[:2] and version >= fix for fix in _WAL_RESET_BACKPORTS)


# A forget merges the words index this many pages a transaction: each step is short.
MERGE_PAGES = 50
# Pages of the words index merged in one tidying step (about 3 ms of lock on a slow box).
TIDY_PAGES = 16


class SqliteStore:
    """The embedded engine: one SQLite connection with dreamd's rules attached.

    No transaction is ever opened implicitly (see `driver`, which also says why
    dreamd's processes run the bundled library and a `Memory` the system's); writes go
    through `write()`, which is BEGIN IMMEDIATE: a deferred transaction that later
    upgrades to a write fails at once with SQLITE_BUSY,
    whatever the busy timeout, while IMMEDIATE waits its turn behind the chat app.
    """

    # dreamd checkpoints the WAL itself, at most this often, after its own writes. If it
    # left that to SQLite's autocheckpoint, the chat app's commit that happens to cross
    # the 1000-page mark would pay for copying dreamd's pages into the database. (dreamd's
    # own connection keeps SQLite's autocheckpoint too: measured, turning it off let more
    # of that work fall on the app's commits.)
    CHECKPOINT_EVERY = 0.2

    engine = "sqlite"
    shared = False  # one dreamd at a time: the instance lock (runtime.lock)

    def __init__(self, conn: Raw, path: Path, read_only: bool = False,
                 library: str = BUNDLED, busy_timeout_ms: int = 5000) -> None:
        self.conn = conn
        self.library = library
        self.busy_timeout_ms = busy_timeout_ms
        # On an affected library (a Memory's, in the app's process) dreamd's code runs no
        # checkpoint of its own, and SQLite's automatic one is off (see `connect`): the
        # race is a checkpoint's, and the daemon's checkpoints run the bundled library
        # (forget's purge is the one exception, asked for).
        self.checkpoints = not has_wal_reset_bug(sqlite_version(library))
        self.path = path
        self.where = str(path)
        self.read_only = read_only
        self._checkpointed = time.monotonic()
        self.lock_times = WriteLockTimes()
        self._released: float | None = None
        self._tidies_words = False
        # One write at a time among this connection and its siblings: a sibling waits
        # here, and takes the file's lock the moment the other lets it go, instead of in
        # SQLite's busy handler, which sleeps 1, 2, 5 then 10 ms between its tries.
        self._writer = threading.Lock()
        self.quiet: Callable[[], contextlib.AbstractContextManager[object]] = \
            contextlib.nullcontext
        if self.checkpoints:  # dreamd's own library (apsw) has the hook: see `_committed`
            conn.on_commit(self._committed)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    @contextlib.contextmanager
    def write(self, *keys: str, alone: bool = False) -> Iterator[Raw]:
        """A short BEGIN IMMEDIATE transaction: commit on success, roll back on error.
        SQLite's one writer at a time already keeps every write alone: `keys` and `alone`
        (see `Store.write`) change nothing here."""
        if self.conn.in_transaction:
            raise StoreError("internal: nested write transaction")
        with self.quiet():
            asked = time.perf_counter()
            with self._writer:
                self.conn.execute("BEGIN IMMEDIATE")
                locked = time.perf_counter()
                self.lock_times.wait(locked - asked)
                before = self.conn.total_changes
                try:
                    yield self.conn
                except BaseException:
                    # SQLite may have rolled back already (a full disk, an interrupt):
                    # then a ROLLBACK would fail with "no transaction is active" and hide
                    # the real error.
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    self.lock_times.add(time.perf_counter() - locked)
                    raise
                self._released = None
                self.conn.execute("COMMIT")
                self.lock_times.add((self._released or time.perf_counter()) - locked,
                                    self.conn.total_changes - before)
        if time.monotonic() - self._checkpointed >= self.CHECKPOINT_EVERY:
            self.checkpoint_log()

    def take(self, conn: Any, key: str) -> bool:
        return True  # the one writer: nobody else holds it

    def sibling(self) -> SqliteStore | None:
        if self.read_only:
            return None
        other = connect(self.path, self.busy_timeout_ms, library=self.library)
        other.lock_times = self.lock_times
        other._writer = self._writer
        return other

    @contextlib.contextmanager
    def read(self) -> Iterator[Raw]:
        """A read transaction, so several SELECTs see one snapshot; closed on exit."""
        if self.conn.in_transaction:
            raise StoreError("internal: nested read transaction")
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def changes(self) -> tuple[int, int]:
        """SQLite's data version (it moves when another connection commits) and the rows
        this connection has changed (its own writes do not move the data version)."""
        row = self.conn.execute("PRAGMA data_version").fetchone()
        return int(row[0]), self.conn.total_changes

    def peek(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        with self.read() as conn:
            return list(conn.execute(sql, tuple(parameters)).fetchall())

    def _committed(self, raw: Any, name: str, pages: int) -> int:
        """SQLite's WAL hook: a commit has written its frames and let go of the write
        lock. It marks that moment, so the write lock's time is what the app could have
        waited, without the automatic checkpoint a COMMIT may go on to run; then does what
        SQLite's own hook does, that checkpoint, past 1,000 pages of WAL."""
        self._released = time.perf_counter()
        if pages >= AUTOCHECKPOINT_PAGES:
            # As SQLite's own hook, whatever the checkpoint says: the commit is done, and
            # an error here would be reported as the COMMIT's (another connection's
            # checkpoint running, say, is SQLITE_BUSY).
            with contextlib.suppress(*driver.Error):
                raw.wal_checkpoint(name, driver.CHECKPOINT_PASSIVE)
        return 0  # SQLITE_OK

    def settle_turns(self, wait: float = 0.0) -> int:
        """SQLite hands out ids under its write lock: every id a reader sees is final."""
        return int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM exchanges")
                   .fetchone()[0])

    def checkpoint_log(self) -> None:
        """Copy what it can of the WAL into the database without waiting for anyone:
        keeps the WAL bounded and never blocks the chat app's writes. (Not on an affected
        library: see `checkpoints`.)"""
        if not self.checkpoints:
            return
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._checkpointed = time.monotonic()

    def purge_log(self, wait: bool = True) -> bool:
        """Copy the whole WAL into the database and empty it, waiting (within the busy
        timeout) for readers — and meanwhile holding off the app's writes. Returns whether
        the WAL is now empty: with another connection mid-read it is not, and its old
        frames stay until SQLite next resets it. Without `wait`, it tries once and gives
        up at once if anyone is reading or writing."""
        timeout = self.conn.execute("PRAGMA busy_timeout").fetchone()[0]
        if not wait:
            self.conn.execute("PRAGMA busy_timeout = 0")
        try:
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
        self._checkpointed = time.monotonic()
        return bool(busy == 0)

    def engine_info(self) -> dict[str, object]:
        return {"version": driver.library_version(self.library), "library": self.library,
                "wal_reset_bug": has_wal_reset_bug(sqlite_version(self.library)),
                "system": {"version": driver.library_version(SYSTEM),
                           "wal_reset_bug": has_wal_reset_bug(sqlite_version(SYSTEM))}}

    def merge_words(self) -> bool:
        if _merged(self.conn, -MERGE_PAGES):
            return True
        # Nothing left to merge: `optimize`, nearly free by now, makes sure it is one part.
        self.conn.execute("INSERT INTO dreamd_fts (dreamd_fts) VALUES ('optimize')")
        return False

    def tidy_words(self) -> bool:
        # FTS5 merges the parts of its index as they pile up, inside the write that adds
        # one: on a slow box a 1 ms insert of 128 turns then held the lock 20-25 ms. Its
        # own merging is turned off (a setting the file keeps) and done here instead, a
        # step of TIDY_PAGES in a write of its own; FTS5 still merges at once past 16
        # parts at a level, which these steps keep it from reaching.
        with self.write() as conn:
            if not self._tidies_words:
                row = conn.execute(
                    "SELECT v FROM dreamd_fts_config WHERE k = 'automerge'").fetchone()
                if row is None or str(row[0]) != "0":
                    conn.execute(
                        "INSERT INTO dreamd_fts (dreamd_fts, rank) VALUES ('automerge', 0)")
            merged = _merged(conn, TIDY_PAGES)
        self._tidies_words = True  # once the setting is committed
        return merged

    def vacuum(self, tables: Sequence[str]) -> None:
        self.conn.execute("VACUUM")

    def listen(self, wake: threading.Event, stop: threading.Event,
               on_change: Callable[[str | None], None]) -> bool:
        return False  # the caller's own look is one indexed read

    def close(self) -> None:
        self.conn.close()



def _merged(conn: Raw, pages: int) -> bool:
    """One FTS5 `merge` step of the words index (`pages` below zero: whether or not a
    level is due); whether it merged anything (the command's own row is one change)."""
    before = conn.total_changes
    conn.execute("INSERT INTO dreamd_fts (dreamd_fts, rank) VALUES ('merge', ?)", (pages,))
    return conn.total_changes - before >= 2


def _check_sqlite_file(path: Path) -> None:
    """Refuse a directory or an unreadable file before SQLite touches it.

    The file itself is never opened here: closing any descriptor of a file drops every
    fcntl() lock this process holds on it, SQLite's included — a chat app that opens a
    Memory beside its own connection would lose its locks, and the next connection to
    close elsewhere would checkpoint and delete the WAL under it. Whether the file is an
    SQLite database is SQLite's to say (`not_sqlite`)."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not an SQLite database file")
    if not os.access(path, os.R_OK):
        raise StoreError(f"{path} cannot be read: permission denied")


def sqlite_failure(exc: BaseException) -> StoreError | None:
    """SQLite's exception as dreamd's error (None when it is not one): a lock held past
    the busy timeout is `StoreBusy`, anything else a `StoreError` with its words."""
    if not isinstance(exc, driver.Error):
        return None
    text = str(exc)
    if driver.is_busy(exc):
        return StoreBusy(f"the memory file stayed locked by another process past the busy "
                         f"timeout ({text}); try again")
    return StoreError(f"the memory file: {text}")


def _opening_error(path: Path, exc: BaseException) -> StoreError:
    if driver.is_not_a_database(exc):
        return StoreError(f"{path} is not an SQLite database file")
    failure = sqlite_failure(exc)
    if isinstance(failure, StoreBusy):
        return failure
    return StoreError(f"{path} cannot be opened as an SQLite database: {exc}")


def connect_readonly(path: str | Path, busy_timeout_ms: int = 5000,
                     library: str = BUNDLED) -> SqliteStore:
    """Open the memory file for reading only: no migration, no journal-mode change, no
    checkpoint on close — the file stays byte-identical. (On a WAL file that has no -wal
    and -shm beside it, SQLite creates them, empty, as any reader does.)"""
    path = Path(path).expanduser()
    if not path.exists():
        raise StoreError(f"{path} does not exist")
    _check_sqlite_file(path)
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = driver.open_file(uri, busy_timeout_ms, read_only=True, library=library)
        conn.execute("PRAGMA schema_version").fetchone()  # reads the header: is it SQLite?
    except driver.Error as exc:
        raise _opening_error(path, exc) from None
    return SqliteStore(conn, path, read_only=True, library=library,
                       busy_timeout_ms=busy_timeout_ms)


def connect(path: str | Path, busy_timeout_ms: int = 5000, create: bool = False,
            library: str = BUNDLED) -> SqliteStore:
    """Open the memory file with the contract: busy timeout, autocommit, WAL verified.

    With `create`, a missing file (and its directory) is created and put in WAL mode;
    without it, a missing file is an error. An existing file must already answer `wal`
    or be switched to it — if it cannot be (read-only, other journal in use), that is
    an error, because without WAL the chat app and dreamd would block each other.
    """
    path = Path(path).expanduser()
    exists = path.exists()
    if exists:
        _check_sqlite_file(path)
    elif not create:
        if not path.parent.is_dir():
            raise StoreError(f"directory {path.parent} does not exist (for {path})")
        raise StoreError(f"{path} does not exist")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    if exists and not os.access(path, os.W_OK):
        raise StoreError(f"{path} is read-only: dreamd needs to write its derived memory")
    if exists and not os.access(path.parent, os.W_OK):
        raise StoreError(
            f"directory {path.parent} is not writable: SQLite keeps the -wal and -shm files there"
        )
    try:
        conn = driver.open_file(str(path), busy_timeout_ms, library=library)
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("PRAGMA secure_delete=ON")
        store = SqliteStore(conn, path, library=library, busy_timeout_ms=busy_timeout_ms)
        if not store.checkpoints:
            conn.execute("PRAGMA wal_autocheckpoint=0")
    except driver.Error as exc:
        raise _opening_error(path, exc) from None
    if str(mode).lower() != "wal":
        conn.close()
        raise StoreError(f"{path} could not be put in WAL mode (journal_mode is {mode!r})")
    return store

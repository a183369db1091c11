"""Opening the memory store for dreamd: connect, migrate, and check the SQLite library.
A target is a PostgreSQL URL (`postgresql://…`: the engine in `store/postgres/`) or an
SQLite file (`store/sqlite/`); `_connect` is the one place that tells them apart.

Code above `dreamd.store` opens memory only through these functions and holds what they
return as an `interface.Store`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dreamd.config import DEFAULT_DB, Config
from dreamd.errors import StoreError
from dreamd.logger import Logger
from dreamd.store.failure import engine_failure
from dreamd.store.interface import Store
from dreamd.store.postgres import schema as pg_schema
from dreamd.store.postgres.store import PgStore
from dreamd.store.postgres.store import connect as pg_connect
from dreamd.store.sqlite import driver
from dreamd.store.sqlite.driver import BUNDLED, LIBRARIES
from dreamd.store.sqlite.migrate import migrate, require_current
from dreamd.store.sqlite.store import (
    SqliteStore,
    connect,
    connect_readonly,
    has_wal_reset_bug,
    sqlite_version,
)
from dreamd.url import is_url

_warned = False


def check_sqlite(log: Logger) -> None:
    """Log the library version once; warn once when it carries the WAL-reset bug."""
    global _warned
    if _warned:
        return
    _warned = True
    version = sqlite_version()
    log.info("sqlite_library", version=driver.library_version())
    if has_wal_reset_bug(version):
        log.warning(
            "sqlite_wal_reset_bug",
            version=driver.library_version(),
            detail="this SQLite can corrupt a WAL file when two processes write and "
            "checkpoint at once; run on 3.51.3+, 3.50.7+ or 3.44.6+ "
            "(see docs/explanation/wal-guest.md)",
        )


def ensure_directory(config: Config) -> None:
    """Only the default location is created with its directories; a path someone typed
    must be in an existing directory, so a typo does not scatter new files around."""
    path = config.db_path
    if path.parent.exists():
        return
    if config.db != DEFAULT_DB:
        raise StoreError(f"directory {path.parent} does not exist (for {path})")
    path.parent.mkdir(parents=True, exist_ok=True)


def _check_library(library: str) -> None:
    if library not in LIBRARIES:
        raise ValueError(f"sqlite must be one of {', '.join(LIBRARIES)}, got {library!r}")


def target_of(config: Config, path: str | Path | None = None) -> str | Path:
    """Where memory lives: `path` when a program names one, else the configured store
    (a PostgreSQL URL, or the SQLite file at `db`)."""
    if path is not None:
        return path
    return config.store_url or config.db_path


@dataclass(frozen=True)
class _Opened:
    """A store just opened, with what its engine does to set up or check its tables."""

    store: Store
    set_up: Callable[[], object]
    require_current: Callable[[], None]


def _connect(config: Config, target: str | Path, busy_timeout_ms: int, *,
             read_only: bool = False, create: bool = False,
             library: str = BUNDLED) -> _Opened:
    """The one place a target becomes an engine: a URL is a PostgreSQL server, anything
    else an SQLite file (created, with its directories, where `create` allows)."""
    if is_url(str(target)):
        pg = pg_connect(str(target), config.store.schema, busy_timeout_ms,
                        read_only=read_only)
        return _Opened(pg, lambda: _set_up_pg(pg), lambda: pg_schema.require_current(pg))
    if read_only:
        file = connect_readonly(target, busy_timeout_ms, library=library)
    else:
        file = connect(target, busy_timeout_ms, create=create, library=library)
    return _Opened(file, lambda: _set_up_file(file, target), lambda: require_current(file))


def _set_up_pg(store: PgStore) -> None:
    try:
        pg_schema.migrate(store)
    except BaseException as exc:
        failure = engine_failure(exc)
        if failure is not None:
            raise StoreError(f"cannot set up dreamd's tables in {store.where}: "
                             f"{str(failure).removeprefix('PostgreSQL: ')}") from None
        raise


def _set_up_file(store: SqliteStore, path: str | Path) -> None:
    try:
        migrate(store)
    except driver.Error as exc:
        raise StoreError(f"{path}: {exc}") from None


def _closed_on_failure(store: Store, step: Callable[[], object]) -> Store:
    try:
        step()
    except BaseException:
        store.close()
        raise
    return store


def open_store(config: Config, create: bool = True, path: str | Path | None = None,
               library: str = BUNDLED) -> Store:
    """Open (creating where allowed) and migrate the configured memory store — or `path`,
    which a program names (a file's directories are created with it). A file is opened
    on the SQLite `library` (see `store/sqlite/driver.py`)."""
    _check_library(library)
    target = target_of(config, path)
    if path is None and create and not is_url(str(target)):
        ensure_directory(config)
    opened = _connect(config, target, config.store.busy_timeout_ms, create=create,
                      library=library)
    return _closed_on_failure(opened.store, opened.set_up)


def open_readonly(config: Config, current: bool = True, path: str | Path | None = None,
                  library: str = BUNDLED) -> Store:
    """Open the configured memory store (or `path`) for reading only: nothing is migrated
    or written, and (with `current`) a store dreamd has not set up yet is named as such."""
    _check_library(library)
    opened = _connect(config, target_of(config, path), config.store.busy_timeout_ms,
                      read_only=True, library=library)
    return _closed_on_failure(opened.store, opened.require_current) if current \
        else opened.store


def open_brief(config: Config, read_only: bool = False) -> Store:
    """A connection for one short look or write beside a running pass: a 1 s busy timeout,
    nothing migrated."""
    return _connect(config, target_of(config), 1000, read_only=read_only).store


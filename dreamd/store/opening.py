"""Opening the memory store for dreamd: connect, migrate, and check the SQLite library.
A PostgreSQL URL (`postgresql://…`) opens the PostgreSQL engine instead.

Code above `dreamd.store` opens memory only through these functions and holds what they
return as an `interface.Store`."""

from __future__ import annotations

from pathlib import Path

from dreamd.config import DEFAULT_DB, Config
from dreamd.errors import StoreError
from dreamd.logger import Logger
from dreamd.store import pg_schema
from dreamd.store import sqlite_driver as driver
from dreamd.store.connect import (
    connect,
    connect_readonly,
    has_wal_reset_bug,
    sqlite_version,
)
from dreamd.store.failure import engine_failure
from dreamd.store.interface import Store
from dreamd.store.migrations import migrate, require_current
from dreamd.store.postgres import PgStore
from dreamd.store.postgres import connect as pg_connect
from dreamd.store.sqlite_driver import BUNDLED, LIBRARIES
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


def _url(config: Config, path: str | Path | None) -> str | None:
    if path is not None:
        return str(path) if is_url(str(path)) else None
    return config.store_url


def _migrated_pg(store: PgStore) -> Store:
    try:
        pg_schema.migrate(store)
    except BaseException as exc:
        store.close()
        failure = engine_failure(exc)
        if failure is not None:
            raise StoreError(f"cannot set up dreamd's tables in {store.where}: "
                             f"{str(failure).removeprefix('PostgreSQL: ')}") from None
        raise
    return store


def open_store(config: Config, create: bool = True, path: str | Path | None = None,
               library: str = BUNDLED) -> Store:
    """Open (creating where allowed) and migrate the configured memory store — or `path`,
    which a program names (a file's directories are created with it). A file is opened
    on the SQLite `library` (see `sqlite_driver`)."""
    _check_library(library)
    url = _url(config, path)
    if url is not None:
        return _migrated_pg(pg_connect(url, config.store.schema,
                                       config.store.busy_timeout_ms))
    if path is None:
        path = config.db_path
        if create:
            ensure_directory(config)
    store = connect(path, config.store.busy_timeout_ms, create=create, library=library)
    try:
        migrate(store)
    except driver.Error as exc:
        store.close()
        raise StoreError(f"{path}: {exc}") from None
    except BaseException:
        store.close()
        raise
    return store


def open_readonly(config: Config, current: bool = True, path: str | Path | None = None,
                  library: str = BUNDLED) -> Store:
    """Open the configured memory file (or `path`) for reading only: nothing is migrated
    or written, and (with `current`) a file dreamd has not set up yet is named as such."""
    _check_library(library)
    url = _url(config, path)
    if url is not None:
        pg = pg_connect(url, config.store.schema, config.store.busy_timeout_ms,
                        read_only=True)
        if current:
            try:
                pg_schema.require_current(pg)
            except BaseException:
                pg.close()
                raise
        return pg
    store = connect_readonly(config.db_path if path is None else path,
                             config.store.busy_timeout_ms, library=library)
    if not current:
        return store
    try:
        require_current(store)
    except BaseException:
        store.close()
        raise
    return store


def open_brief(config: Config, read_only: bool = False) -> Store:
    """A connection for one short look or write beside a running pass: a 1 s busy timeout,
    nothing migrated."""
    url = config.store_url
    if url is not None:
        return pg_connect(url, config.store.schema, 1000, read_only=read_only)
    if read_only:
        return connect_readonly(config.db_path, 1000)
    return connect(config.db_path, busy_timeout_ms=1000)

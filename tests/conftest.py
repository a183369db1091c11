from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dreamd.store.connect import SqliteStore

# Tests never read a developer's own config or DREAMD_* settings.
for _name in [n for n in os.environ if n.startswith("DREAMD_")]:
    del os.environ[_name]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def opened(db: Path) -> Iterator[SqliteStore]:
    from tests.helpers import config_for, make_chat_file, open_sqlite

    make_chat_file(db).close()
    store = open_sqlite(config_for(db))
    yield store
    store.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A real PostgreSQL server for this test process. Without its binaries the tests
    that need it are skipped on a developer's machine and fail in CI (CI=true), which
    installs them."""
    from testkit.pg import PgServer, bindir

    if bindir() is None:
        message = ("PostgreSQL server binaries not found (Debian: apt install "
                   "postgresql-15, or set PG_BINDIR)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where memory lives, on each engine: a new SQLite file's path, or a new PostgreSQL
    database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    server = request.getfixturevalue("pg_server")
    return str(server.new_database())


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The embedded default embedder, one thread: the selector's vector space."""
    from dreamd.backends.local import LocalEmbedder

    return LocalEmbedder(threads=1)

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


# Each worker starts with its share of the long tests, so that the run does not end on
# one of them running alone while the other workers sit idle. A test's seconds (setup,
# call, teardown) in the last run are kept in pytest's cache; a test not timed yet counts
# as long when it is marked `long` (a fresh clone's first run). pytest-xdist's worksteal
# hands worker k the k-th of n equal runs of the collection (and later moves the tail of
# a busy worker's queue to an idle one), so the long tests are dealt into n piles of
# about equal seconds, each put at the head of its run. The `heavy` ones (many processes
# each) share the first pile: run together they only fight over the two cores.
TOOK = "dreamd/took"
LONG = 5.0  # seconds: a test this long or longer is dealt out ahead of the rest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    took: dict[str, float] = config.cache.get(TOOK, {}) if config.cache else {}

    def seconds(item: pytest.Item) -> float:
        return took.get(item.nodeid, LONG if item.get_closest_marker("long") else 0.0)

    long = sorted((i for i in items if seconds(i) >= LONG), key=seconds, reverse=True)
    rest = [i for i in items if seconds(i) < LONG]
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    piles: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for item in long:  # the longest first, each to the lightest pile so far
        heavy = item.get_closest_marker("heavy") is not None
        min(piles[:1] if heavy else piles, key=lambda pile: sum(map(seconds, pile))
            ).append(item)
    ordered: list[pytest.Item] = []
    for k, pile in enumerate(piles):
        size = (len(items) - len(ordered)) // (workers - k)  # worksteal's k-th run
        ordered += pile + rest[:max(0, size - len(pile))]
        del rest[:max(0, size - len(pile))]
    items[:] = ordered + rest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _timings[report.nodeid] = _timings.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if config.cache is None or hasattr(config, "workerinput"):
        return  # an xdist worker: the controller saw every report and keeps them
    took: dict[str, float] = config.cache.get(TOOK, {})
    took.update({k: round(v, 1) for k, v in _timings.items()})
    config.cache.set(TOOK, {k: v for k, v in took.items() if v >= 1.0})


_timings: dict[str, float] = {}


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

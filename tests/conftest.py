from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dreamd.store.sqlite.store import SqliteStore
from testkit.served import ROOT, Served, env_for

# Tests never read a developer's own config or DREAMD_* settings.
for _name in [n for n in os.environ if n.startswith("DREAMD_")]:
    del os.environ[_name]


# dreamd run in this process (click's CliRunner: `--force`, `--loop`) would lower the test
# process's own priority for the rest of the suite (config pass.background); the tests of
# that priority run dreamd in processes of their own, with an environment of their own.
os.environ["DREAMD_PASS__BACKGROUND"] = "false"

# The optimized model the local embedder keeps (embed.model_cache "") goes to a directory
# of this run's, never to the developer's ~/.cache; removed when the run ends. One for
# the whole run: pytest-xdist's workers inherit it from the process that starts them, so
# the model is optimized once, not once a worker (four builds at once starved a busy box).
_SHARED = "_DREAMD_TEST_CACHE"
if not os.path.isdir(os.environ.get(_SHARED, "")):
    os.environ[_SHARED] = tempfile.mkdtemp(prefix="dreamd-test-cache-")
    atexit.register(shutil.rmtree, os.environ[_SHARED], True)
os.environ.pop("CACHE_DIRECTORY", None)
os.environ["XDG_CACHE_HOME"] = os.environ[_SHARED]


@pytest.fixture(autouse=True)
def _priority_kept() -> Iterator[None]:
    """A test that runs dreamd's command line in this process must not leave the process
    at background priority (nice 10, SCHED_BATCH): the tests after it on this worker would
    run starved beside the others, and a test that waits for two jobs to ask at once saw
    its 10 s hold run out under CI's load."""
    before = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    yield
    after = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    if after != before:  # given back where allowed, so that each such test is named
        with contextlib.suppress(OSError):
            for tid in (int(t) for t in os.listdir("/proc/self/task")):
                os.setpriority(os.PRIO_PROCESS, tid, before[0])
                os.sched_setscheduler(tid, before[1], os.sched_param(0))
    assert after == before, ("the test left this process at background priority "
                             f"(nice, policy {before} -> {after}): run dreamd in it with "
                             "DREAMD_PASS__BACKGROUND=false")


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


@pytest.fixture(scope="session")
def two_people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ana (the default user, single-user style: no user named) and Bo, dreamed once.
    Shared by the tests of a worker: copy it before changing it."""
    path = tmp_path_factory.mktemp("safety") / "memory.db"
    server = Served(str(path), "--create")
    try:
        with server.client() as client:
            turns = [{"session": "ana-1", "role": "user",
                      "content": "I adopted a greyhound called Pilot on Saturday.",
                      "created_at": "2026-03-07T10:00:00Z"},
                     {"session": "ana-1", "role": "user",
                      "content": "I work as a marine biologist in Lisbon.",
                      "created_at": "2026-03-07T10:01:00Z"},
                     {"user": "bo", "session": "bo-1", "role": "user",
                      "content": "My cat Comet hates the rain.",
                      "created_at": "2026-03-08T09:00:00Z"}]
            assert client.post("/v1/turns", json={"turns": turns}).status_code == 201
    finally:
        assert server.stop() == 0, server.output()
    done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(path), "--force"],
                          cwd=ROOT, env=env_for(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return path

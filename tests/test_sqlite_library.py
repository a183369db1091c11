"""dreamd's own connections run a SQLite without the WAL-reset bug, whatever library the
system has: the store its processes open, the read-only commands, and `dreamd status`,
which says so. A `Memory` in a chat app's process shares the app's library unless told
otherwise, because two copies of SQLite in one process do not see each other's locks."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dreamd.memory import Memory
from dreamd.store.interface import Store
from dreamd.store.opening import open_readonly, open_store
from dreamd.store.sqlite import driver
from dreamd.store.sqlite.store import has_wal_reset_bug
from tests.helpers import ROOT, add_turns, config_for, dreamd_env, make_chat_file


def library_of(store: Store) -> tuple[int, int, int]:
    """The SQLite the store's own connection runs, asked of SQLite itself."""
    with store.read() as conn:
        text = conn.execute("SELECT sqlite_version()").fetchone()[0]
    major, minor, patch = (int(p) for p in str(text).split(".")[:3])
    return major, minor, patch


def chat_file(db: Path) -> None:
    app = make_chat_file(db)
    add_turns(app, "s1", ["I adopted a greyhound called Pepper.", "Lovely!"])
    app.close()


def test_the_store_and_the_read_only_store_run_a_fixed_sqlite(db: Path) -> None:
    chat_file(db)
    config = config_for(db)
    for store in (open_store(config), open_readonly(config)):
        try:
            version = library_of(store)
            assert not has_wal_reset_bug(version), version
            facts = store.engine_info()
            assert facts["version"] == ".".join(map(str, version))
            assert facts["library"] == "bundled" and facts["wal_reset_bug"] is False
            assert facts["system"]["version"] == sqlite3.sqlite_version
        finally:
            store.close()


def test_status_names_the_sqlite_dreamd_runs(db: Path) -> None:
    """Before dreamd's first pass and after it: the library dreamd runs, and the system's
    (what a Python app's `sqlite3` runs here)."""
    chat_file(db)

    def status() -> dict[str, object]:
        run = subprocess.run(
            [sys.executable, "-m", "dreamd", "--db", str(db), "status", "--json"], cwd=ROOT,
            env=dreamd_env(), capture_output=True, text=True, timeout=300, check=True)
        engine: dict[str, object] = json.loads(run.stdout)["sqlite"]
        return engine

    before = status()
    open_store(config_for(db)).close()
    for engine in (before, status()):
        assert engine["wal_reset_bug"] is False and engine["library"] == "bundled"
        major, minor, patch = (int(p) for p in str(engine["version"]).split(".")[:3])
        assert not has_wal_reset_bug((major, minor, patch))
        assert engine["system"] == {
            "version": sqlite3.sqlite_version,
            "wal_reset_bug": has_wal_reset_bug(
                tuple(int(p) for p in sqlite3.sqlite_version.split(".")[:3]))}  # type: ignore[arg-type]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_memory_runs_the_library_it_is_given(db: Path, read_only: bool) -> None:
    chat_file(db)
    config = config_for(db)
    open_store(config).close()
    shared = Memory(db, config=config, read_only=read_only)
    fixed = Memory(db, config=config, read_only=read_only, sqlite="bundled")
    try:
        assert ".".join(map(str, library_of(shared.store))) == sqlite3.sqlite_version
        assert not has_wal_reset_bug(library_of(fixed.store))
    finally:
        shared.close()
        fixed.close()
    with pytest.raises(ValueError, match="sqlite must be one of bundled, system, got 'apsw'"):
        Memory(db, config=config, sqlite="apsw")


def test_two_sqlite_libraries_in_one_process_do_not_see_each_others_locks(db: Path) -> None:
    """Why a Memory shares the app's library. The app holds the write lock: another
    process and another connection on the app's library wait. A connection on a second
    copy of SQLite in the app's process is granted the lock as well (two writers on one
    WAL), and once it closes its file, the process has lost the app's lock altogether:
    another process is granted it too."""
    chat_file(db)

    def other_process_may_write() -> bool:
        run = subprocess.run(
            [sys.executable, "-c", "import apsw, sys; c = apsw.Connection(sys.argv[1]); "
             "c.set_busy_timeout(50); c.execute('BEGIN IMMEDIATE')", str(db)],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 or "BusyError" in run.stderr, run.stderr
        return run.returncode == 0

    app = sqlite3.connect(db, isolation_level=None, timeout=0.05)
    app.execute("BEGIN IMMEDIATE")
    assert not other_process_may_write()
    same = driver.open_file(str(db), busy_timeout_ms=50, library=driver.SYSTEM)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        same.execute("BEGIN IMMEDIATE")
    same.close()
    assert not other_process_may_write()

    second_copy = driver.open_file(str(db), busy_timeout_ms=50, library=driver.BUNDLED)
    second_copy.execute("BEGIN IMMEDIATE")  # granted beside the app's
    second_copy.execute("ROLLBACK")
    second_copy.close()
    assert other_process_may_write()  # the app's lock went with the second copy's file
    app.execute("ROLLBACK")
    app.close()


def test_a_memory_on_an_affected_library_leaves_checkpoints_to_dreamd(db: Path) -> None:
    """The WAL-reset race is a checkpoint's: where the system's library has the bug, a
    Memory on it runs none (SQLite's automatic one is off, dreamd's own settle is not
    run), and the daemon's, on the bundled library, copy the WAL back instead."""
    from dreamd.backends.hashing import HashingEmbedder

    chat_file(db)
    open_store(config_for(db)).close()
    affected = has_wal_reset_bug(
        tuple(int(p) for p in sqlite3.sqlite_version.split(".")[:3]))  # type: ignore[arg-type]
    memory = Memory(db, config=config_for(db), embedder=HashingEmbedder())
    try:
        turns = 600  # well past SQLite's 1,000-page automatic checkpoint
        for i in range(turns):
            memory.remember("s1", "user", f"Pepper chased ball number {i} across the park.")
        assert memory.store.conn.execute(  # type: ignore[attr-defined]
            "PRAGMA wal_autocheckpoint").fetchone()[0] == (0 if affected else 1000)
        daemon = open_store(config_for(db))  # another dreamd connection, the bundled library
        try:
            _busy, frames, copied = daemon.conn.execute(  # type: ignore[attr-defined]
                "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            daemon.close()
    finally:
        memory.close()
    if affected:  # nothing was copied back before the daemon's checkpoint
        assert frames > 1000 and copied == frames, (frames, copied)
    else:
        assert frames < 1000 + 50, frames


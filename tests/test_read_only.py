"""Read-only commands write nothing: the file (and its -wal) stay byte-identical."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamd.cli.commands import main
from dreamd.store.sqlite.driver import SYSTEM, library_version
from dreamd.store.sqlite.store import has_wal_reset_bug, sqlite_version
from tests.helpers import add_turns, chat_texts, dreamd_env

READ_ONLY = [
    ["status"],
    ["status", "--json"],
    ["show"],
    ["recall", "sourdough bread"],
    ["context", "s1"],
    ["export", "--user", "default"],
    ["forget", "--user", "default", "--dry-run"],
]


def digest(path: Path) -> dict[str, str]:
    """The file and its -wal (the -shm is SQLite's shared-memory index: readers write
    their read marks there by design)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.parent.glob(path.name + "*")) if not p.name.endswith("-shm")}


def invoke(db: Path, *args: str):
    env = dreamd_env()
    return CliRunner().invoke(main, ["--db", str(db), *args], env=env)


def app_file(db: Path, journal: str = "delete") -> sqlite3.Connection:
    """A chat app's own file, made without dreamd (its default journal, not WAL)."""
    from dreamd.store.sqlite.schema import CORE_TABLES

    conn = sqlite3.connect(db, isolation_level=None, timeout=10)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.executescript(CORE_TABLES)
    add_turns(conn, "s1", chat_texts(0, 6))
    return conn


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a))
def test_a_file_dreamd_never_touched_stays_as_it_was(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "memory.db"
    app_file(db).close()
    before = digest(db)
    result = invoke(db, *args)
    assert digest(db) == before
    if args == ["status"]:  # status says what waits for the first pass
        bundled, system = library_version(), library_version(SYSTEM)
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [
            f"memory file  {db}",
            f"sqlite       {bundled} (bundled); the system's {system}" + (
                ", which a Python app's sqlite3 runs, has the WAL-reset bug: see "
                "docs/explanation/wal-guest.md for the app's side"
                if has_wal_reset_bug(sqlite_version(SYSTEM)) else ""),
            "dreamd has not run on this file yet: 6 turns in 1 session wait for its first "
            f"pass (dreamd --db {db} --force)"]
    elif args == ["status", "--json"]:
        assert result.exit_code == 0, result.output
        assert '"dreamd_has_run": false' in result.output
    else:
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"Error: dreamd has not run on {db} yet: nothing to read until its first pass "
            f"(dreamd --db {db} --force)"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'dreamd%'"
                                ).fetchall()


def test_read_only_commands_leave_a_live_file_and_its_wal_identical(tmp_path: Path) -> None:
    """After a pass, with the chat app's connection open and turns in the WAL."""
    db = tmp_path / "memory.db"
    app_file(db, journal="wal").close()
    assert invoke(db, "--force").exit_code == 0
    app = sqlite3.connect(db, isolation_level=None)
    app.execute("PRAGMA wal_autocheckpoint=0")
    add_turns(app, "s2", chat_texts(1, 4))
    before = digest(db)
    assert f"{db.name}-wal" in before
    for args in READ_ONLY:
        result = invoke(db, *args)
        assert result.exit_code == 0, (args, result.output)
        assert digest(db) == before, args
    app.close()


def test_a_busy_file_is_its_own_error(tmp_path: Path) -> None:
    """The app holds a write on a rollback-journal file: the read waits the busy timeout,
    then says so with its own exit code (4), not as bad input."""
    db = tmp_path / "memory.db"
    app_file(db).close()
    assert invoke(db, "--force").exit_code == 0  # dreamd puts the file in WAL mode
    # The app is another process (in this one, a second copy of SQLite would not see
    # its lock: test_sqlite_library).
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); c.execute('PRAGMA journal_mode=DELETE'); "  # as if the app
         "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); sys.stdin.read()",  # had
         str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # switched back
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = CliRunner().invoke(main, ["--db", str(db), "status"],
                                    env=dreamd_env(DREAMD_STORE__BUSY_TIMEOUT_MS="300"))
    finally:
        holder.communicate("", timeout=60)
    assert result.exit_code == 4, result.output
    assert result.output.startswith("Error: the memory file stayed locked by another process")
    assert len(result.output.strip().splitlines()) == 1

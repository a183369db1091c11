"""The memory file contract: WAL, migrations, adoption, bad files, the SQLite check."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dreamd.errors import StoreError
from dreamd.runtime.log import get_logger
from dreamd.store.opening import open_store
from dreamd.store.sqlite import driver
from dreamd.store.sqlite.migrate import migrate
from dreamd.store.sqlite.schema import MIGRATIONS
from dreamd.store.sqlite.store import SqliteStore as Store
from dreamd.store.sqlite.store import connect, has_wal_reset_bug
from tests.helpers import PRIOR_ART_DDL, config_for, open_sqlite, sqlite


def test_fresh_file_is_wal_with_core_and_dreamd_tables(db: Path) -> None:
    store = open_sqlite(config_for(db))
    conn = store.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"exchanges", "sessions", "summaries", "profile", "eras", "narrative",
            "self_state", "dreamd_runs", "dreamd_failures", "dreamd_migrations"} <= tables
    notnull = {r[1]: r[3] for r in conn.execute("PRAGMA table_info(exchanges)")}
    assert notnull["embedding"] == 0
    versions = [r[0] for r in conn.execute("SELECT version FROM dreamd_migrations ORDER BY 1")]
    assert versions == [m.version for m in MIGRATIONS]
    assert migrate(store) == []  # idempotent
    store.close()


def test_a_failing_migration_leaves_no_trace(db: Path) -> None:
    """Each migration is one transaction with its record: a failure rolls back both."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    # A table named like one migration 2 creates makes it fail half-way.
    conn.execute("CREATE TABLE exchanges (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, "
                 "content TEXT, embedding BLOB, created_at TEXT)")
    conn.execute("CREATE TABLE dreamd_runs (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="migration 2"):
        open_store(config_for(db))
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT version FROM dreamd_migrations")] == [1]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "dreamd_state" not in names
    assert "user_id" not in {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}


def prior_art_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(PRIOR_ART_DDL)
    rng = np.random.default_rng(0)
    for i in range(30):
        conn.execute(
            "INSERT INTO exchanges (session_id, role, content, embedding, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (f"s{i % 3}", "user" if i % 2 == 0 else "assistant",
             f"I told you about my garden, item {i}, and my dog Pepper.",
             rng.standard_normal(1536).astype(np.float32).tobytes(),
             f"2026-0{1 + i % 3}-0{1 + i % 9}T10:00:00+00:00"),
        )
    conn.execute("INSERT INTO sessions VALUES ('s0', 'first', '2026-01-01T10:00:00+00:00')")
    conn.execute("INSERT INTO summaries VALUES ('s0', 'An old gist by the app.', ?, 3, "
                 "'2026-01-02T00:00:00+00:00')", (b"\0" * 6144,))
    conn.execute("INSERT INTO profile VALUES ('self', 'Likes gardens.', 1, '2026-01-02')")
    conn.commit()
    conn.close()


def test_prior_art_file_is_adopted_in_place(db: Path) -> None:
    """The app's rows keep their values and dreamd consolidates on top of them."""
    from dreamd.dream.cycle import run_pass
    from tests.helpers import RecordingCompleter

    prior_art_file(db)
    before = sqlite3.connect(db).execute(
        "SELECT id, session_id, role, content, embedding, created_at FROM exchanges ORDER BY id"
    ).fetchall()
    config = config_for(db)
    store = open_sqlite(config)
    completer = RecordingCompleter(store)
    result = run_pass(store, config, completer.embedder, completer, trigger="test", force=True)
    assert not result.failed, result.jobs
    conn = store.conn
    after = conn.execute(
        "SELECT id, session_id, role, content, embedding, created_at FROM exchanges ORDER BY id"
    ).fetchall()
    assert after == before  # the app's rows, vectors included, are untouched
    gists = dict(conn.execute("SELECT session_id, last_exchange_id FROM summaries"))
    last = dict(conn.execute("SELECT session_id, MAX(id) FROM exchanges GROUP BY session_id"))
    assert gists == last
    # The adopted gist was continued incrementally: its text was the previous gist.
    first = [p for p in completer.prompts if p.task == "summarize" and "An old gist" in p.user]
    assert len(first) == 1
    # NOT NULL embedding columns got an empty blob, never a vector of another dimension.
    blobs = {len(r[0]) for r in conn.execute("SELECT embedding FROM summaries")}
    assert blobs == {0}
    assert conn.execute("SELECT COUNT(*) FROM eras").fetchone()[0] == 3
    assert conn.execute("SELECT content FROM profile WHERE id='self'").fetchone()[0]
    store.close()


def test_non_sqlite_file_is_refused_and_unchanged(db: Path) -> None:
    db.write_bytes(b"this is a text file, not a database\n" * 10)
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not an SQLite database"):
        open_store(config_for(db))
    assert db.read_bytes() == before
    assert not Path(f"{db}-wal").exists()


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(config_for(tmp_path / "nope" / "m.db"))
    assert not (tmp_path / "nope").exists()


def test_existing_file_without_create_is_not_created(db: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        connect(db, create=False)
    assert not db.exists()


@pytest.mark.parametrize(
    ("version", "affected"),
    [((3, 6, 23), False), ((3, 7, 0), True), ((3, 40, 1), True), ((3, 44, 5), True),
     ((3, 44, 6), False), ((3, 45, 0), True), ((3, 50, 6), True), ((3, 50, 7), False),
     ((3, 51, 2), True), ((3, 51, 3), False), ((3, 52, 0), False)],
)
def test_wal_reset_bug_versions(version: tuple[int, int, int], affected: bool) -> None:
    assert has_wal_reset_bug(version) is affected


def test_write_is_begin_immediate(opened) -> None:
    """A write takes the write lock at BEGIN: a second writer waits, no upgrade deadlock."""
    # Another connection on the same library (another process's would do as well; a
    # second library in this process would not see the lock: test_sqlite_library).
    other = driver.open_file(str(opened.path), busy_timeout_ms=50, library=opened.library)
    with opened.write(), pytest.raises(driver.Error) as busy:
        other.execute("BEGIN IMMEDIATE")
    assert driver.is_busy(busy.value), busy.value
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()


def test_sqlite_version_is_logged_and_the_bug_warned_once(db: Path) -> None:
    """Once per daemon start (check_sqlite), never on opening a file for a command."""
    from structlog.testing import capture_logs

    import dreamd.store.opening
    from dreamd.runtime.log import configure
    from dreamd.store.sqlite.store import sqlite_version

    configure("debug")  # an earlier test may have left a stricter level configured
    dreamd.store.opening._warned = False
    with capture_logs() as logs:
        open_store(config_for(db)).close()
    assert logs == []
    with capture_logs() as logs:
        dreamd.store.opening.check_sqlite(get_logger())
        dreamd.store.opening.check_sqlite(get_logger())
    events = [e["event"] for e in logs]
    assert events.count("sqlite_library") == 1
    assert events.count("sqlite_wal_reset_bug") == int(has_wal_reset_bug(sqlite_version()))


def test_a_v4_file_moves_to_per_user_eras_with_every_reference_re_keyed(db: Path) -> None:
    """Eras keyed by month alone (v4) become (user, month); dreamd's references to them —
    vectors, stored LLM outputs, failure records, built or not — follow; others stay."""
    store = connect(db, create=True)
    assert migrate(store, upto=4) == [1, 2, 3, 4]
    with store.write() as conn:
        conn.execute("INSERT INTO eras (month, content, session_count, created_at, dreamd_seq) "
                     "VALUES ('2026-07', 'July: moved house', 3, '2026-08-01', 7)")
        conn.executemany("INSERT INTO dreamd_vectors (model, kind, key, vector) VALUES (?,?,?,?)",
                         [("m", "era", "2026-07", b"v1"), ("m", "gist", "s1", b"v2")])
        conn.executemany("INSERT INTO dreamd_outputs (job, item, input_hash, output) "
                         "VALUES (?, ?, 'h', 'o')", [("eras", "2026-07"), ("summarize", "s1")])
        conn.execute("INSERT INTO dreamd_failures (job, item, attempts, last_error, "
                     "first_failed_at, last_failed_at, next_attempt_at) VALUES "
                     "('eras', '2026-08', 2, 'timeout', 't', 't', 't')")
    assert migrate(store) == [m.version for m in MIGRATIONS if m.version > 4]
    conn = store.conn
    pk = [r[1] for r in sorted(conn.execute("PRAGMA table_info(eras)"), key=lambda r: r[5])
          if r[5]]
    assert pk == ["user_id", "month"]
    assert conn.execute("SELECT user_id, month, content, session_count, dreamd_seq FROM eras"
                        ).fetchall() == [("default", "2026-07", "July: moved house", 3, 7)]
    assert sorted(conn.execute("SELECT kind, key FROM dreamd_vectors")) == [
        ("era", "default|2026-07"), ("gist", "s1")]
    assert sorted(conn.execute("SELECT job, item FROM dreamd_outputs")) == [
        ("eras", "default|2026-07"), ("summarize", "s1")]
    assert conn.execute("SELECT job, item, attempts FROM dreamd_failures").fetchall() == [
        ("eras", "default|2026-08", 2)]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.close()


def test_era_references_left_by_the_first_migration_5_are_re_keyed_by_6(db: Path) -> None:
    store = connect(db, create=True)
    migrate(store, upto=5)
    with store.write() as conn:  # what 5 as first shipped left: a failure of an unbuilt era
        conn.executemany("INSERT INTO dreamd_failures (job, item, attempts, last_error, "
                         "first_failed_at, last_failed_at, next_attempt_at) VALUES "
                         "('eras', ?, ?, 'e', 't', 't', 't')",
                         [("2026-08", 1), ("2026-09", 1), ("default|2026-09", 4)])
    migrate(store)
    assert sorted(store.conn.execute("SELECT item, attempts FROM dreamd_failures")) == [
        ("default|2026-08", 1), ("default|2026-09", 4)]  # the newer record of 09 kept
    store.close()


def test_the_real_error_survives_when_sqlite_already_rolled_back(opened: Store) -> None:
    with pytest.raises(ValueError, match="the real error"), opened.write() as conn:
        conn.execute("ROLLBACK")  # as SQLite does itself on a full disk or an interrupt
        raise ValueError("the real error")
    assert not opened.in_transaction
    with opened.write() as conn:  # and the connection is fine afterwards
        conn.execute("SELECT 1")


def test_one_memory_shared_by_a_threaded_chat_server(db: Path) -> None:
    """As the chat-app example does (docs/how-to/python-app.md): one module-level Memory,
    four request threads, each remembering, recalling and building context 300 times — no
    error, no lost turn."""
    import threading

    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.memory.api import Memory

    memory = Memory(db, config=config_for(db), embedder=HashingEmbedder())
    errors: list[BaseException] = []

    def serve(worker: int) -> None:
        try:
            for i in range(300):
                if i % 3 == 0:
                    memory.remember(f"s{worker}", "user", f"turn {i} about my dog Biscuit")
                elif i % 3 == 1:
                    memory.recall("dog", k=3)
                else:
                    memory.context(f"s{worker}", query="dog", budget=200)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns = sqlite(memory.store).conn.execute("SELECT COUNT(*) FROM exchanges").fetchone()[0]
    memory.close()
    assert errors == []
    assert turns == 4 * 100


def test_opening_a_memory_keeps_the_processs_other_connections_locks(db: Path) -> None:
    """A chat app with its own connection opens a Memory on the same file; then another
    process's connection closes. The app's connection must still count as open, or that
    close checkpoints and deletes the WAL under it (closing any descriptor of a file
    drops all of a process's fcntl() locks on it)."""
    import subprocess
    import sys

    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.memory.api import Memory

    Memory(db, config=config_for(db), embedder=HashingEmbedder()).close()  # a dreamd file
    app = sqlite3.connect(db, isolation_level=None)
    app.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                "VALUES ('s', 'user', 'hello', '2026-01-01T00:00:00+00:00')")
    wal = Path(f"{db}-wal")
    inode = wal.stat().st_ino
    Memory(db, config=config_for(db), embedder=HashingEmbedder(), read_only=True).close()
    Memory(db, config=config_for(db), embedder=HashingEmbedder()).close()
    subprocess.run([sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                    " c.execute('SELECT COUNT(*) FROM exchanges').fetchone(); c.close()",
                    str(db)], check=True)
    assert wal.exists() and wal.stat().st_ino == inode
    app.close()

"""Many users in one file: isolation (property-based), forget that erases, export."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamd.config import Config, EmbedConfig
from dreamd.dream.cycle import run_pass
from dreamd.ids import DEFAULT_USER
from dreamd.memory.api import Memory
from dreamd.memory.export import export_user
from dreamd.memory.forget import Scope, forget
from dreamd.store.interface import Conn
from dreamd.store.opening import open_store
from dreamd.store.sqlite.store import SqliteStore as Store
from tests.engines import App
from tests.helpers import (
    RecordingCompleter,
    built_once,
    config_for,
    make_chat_file,
    open_sqlite,
)

ROOT = Path(__file__).resolve().parent.parent
USERS = (DEFAULT_USER, "ana", "bo")
# Every user's words carry a mark no other user's text can contain.
MARK = {DEFAULT_USER: "deftok", "ana": "anatok", "bo": "botok"}
LATER = datetime(2027, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def marks_in(text: str) -> set[str]:
    return {user for user, mark in MARK.items() if mark in text.lower()}


def add_session(app: App | sqlite3.Connection, user: str, session: str, n: int, month: int,
                row_late: bool, salt: int) -> None:
    """What a chat app does; `row_late`: the sessions row arrives after the turns."""
    start = T0 + timedelta(days=31 * month, minutes=salt)

    def file_it() -> None:
        app.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                    "VALUES (?, NULL, ?, ?) ON CONFLICT DO NOTHING",
                    (session, start.isoformat(), user))
    if not row_late:
        file_it()
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        app.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (session, role, f"{MARK[user]}{salt}x{i} {user} talks about "
                     f"{MARK[user]}topic{i % 3} at length",
                     (start + timedelta(minutes=i)).isoformat()))
    if row_late:
        file_it()


def owners(app: App) -> dict[str, str]:
    return {str(s): str(u) for s, u in app.rows("SELECT id, user_id FROM sessions")}


step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(USERS), st.integers(0, 3), st.integers(1, 7),
              st.integers(0, 2), st.booleans()),
    st.tuples(st.just("pass")),
)


def check_isolation(target: str, app: App, completer: RecordingCompleter,
                    config: Config) -> None:
    owner = owners(app)
    # No prompt ever held two users' words.
    for prompt in completer.prompts:
        assert len(marks_in(prompt.system + prompt.user)) <= 1, prompt.user[:300]
    # Every derived row is its user's, built from its user's sessions only.
    for session, user, content in app.rows(
            "SELECT session_id, user_id, content FROM summaries"):
        assert owner[session] == user and marks_in(content) <= {user}
    for table in ("profile", "eras", "narrative"):
        for user, content, inputs in app.rows(
                f"SELECT user_id, content, dreamd_inputs FROM {table}"):
            assert marks_in(content) <= {user}, (table, user, content)
            assert inputs is not None and {owner[s] for s in json.loads(inputs)} == {user}
    for user, statement in app.rows("SELECT user_id, statement FROM facts"):
        assert marks_in(statement) <= {user}, (user, statement)
    for key, data in app.rows("SELECT id, data FROM self_state"):
        user = key.split(":user:")[1] if ":user:" in key else DEFAULT_USER
        assert marks_in(data) <= {user}, (key, data[:300])
    # Recall and context for one user never return another's rows.
    memory = Memory(target, config=config, embedder=completer.embedder)
    try:
        for user in USERS:
            for query in (f"{MARK[user]}topic1", f"{MARK['bo']}topic2 talks"):
                for hit in memory.recall(query, k=20, users=[user]):
                    assert owner[hit.session_id] == user
            for session in (s for s, u in owner.items() if u == user):
                block = memory.context(session, query=f"{MARK['ana']}topic0 deftok botok",
                                       budget=2000)
                assert marks_in(block.text) <= {user}, block.text
    finally:
        memory.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_users_memories_never_mix(engine: str, request: pytest.FixtureRequest) -> None:
    """Any interleaving of three users' sessions (some filed after their turns) and
    passes, on either engine: no prompt, tier, fact, recall or context ever mixes them."""
    server = request.getfixturevalue("pg_server") if engine == "postgresql" else None

    @settings(max_examples=100 if server is None else 30, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step, min_size=1, max_size=12))
    def check(steps: list[tuple]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            target = str(Path(tmp) / "m.db") if server is None else server.new_database()
            app = App(target)
            app.create_tables()  # the chat app was there first
            config = Config(db=target, embed=EmbedConfig(backend="hashing"))
            store = open_store(config)
            completer = RecordingCompleter(store)
            try:
                for salt, action in enumerate(steps):
                    if action[0] == "pass":
                        store.settle_turns(wait=5.0)
                        run_pass(store, config, completer.embedder, completer,
                                 trigger="test", force=True, clock=lambda: LATER)
                        continue
                    _, user, index, n, month, row_late = action
                    session = f"{user}-{index}"
                    known = owners(app).get(session)
                    add_session(app, known or user, session, n, month,
                                row_late and not known, salt)
                store.settle_turns(wait=5.0)
                result = run_pass(store, config, completer.embedder, completer,
                                  trigger="test", force=True, clock=lambda: LATER)
                assert not result.failed, result.jobs
                check_isolation(target, app, completer, config)
            finally:
                store.close()
                app.close()

    check()


def test_a_session_filed_before_its_owner_was_known_moves_with_its_memory(db: Path) -> None:
    """Turns first, sessions row later: the default user's memory built from them goes,
    and the owner's memory gets them."""
    app = make_chat_file(db)
    config = config_for(db)
    store = open_sqlite(config)
    completer = RecordingCompleter(store)
    add_session(app, "ana", "s1", 6, 0, True, 0)
    app.execute("DELETE FROM sessions")  # the app has not said whose it is yet
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    assert store.conn.execute("SELECT user_id FROM summaries").fetchone() == (DEFAULT_USER,)
    assert store.conn.execute("SELECT 1 FROM profile WHERE id = 'self'").fetchone()
    app.execute("INSERT INTO sessions (id, created_at, user_id) VALUES ('s1', ?, 'ana')",
                (T0.isoformat(),))
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    conn = store.conn
    assert conn.execute("SELECT user_id FROM summaries").fetchall() == [("ana",)]
    assert conn.execute("SELECT COUNT(*) FROM profile WHERE user_id = 'default'").fetchone() == (0,)
    assert conn.execute("SELECT COUNT(*) FROM eras WHERE user_id = 'default'").fetchone() == (0,)
    assert conn.execute("SELECT 1 FROM profile WHERE id = 'user:ana'").fetchone()
    store.close()
    app.close()


def test_a_session_the_app_moves_in_place_moves_with_its_memory(db: Path) -> None:
    app, store, completer, config = build(db)
    conn = store.conn
    profile = "SELECT dreamd_inputs FROM profile WHERE id = ?"
    assert "a2" in json.loads(conn.execute(profile, ("user:ana",)).fetchone()[0])
    app.execute("UPDATE sessions SET user_id = 'bo' WHERE id = 'a2'")  # no new row
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    assert conn.execute("SELECT user_id FROM summaries WHERE session_id = 'a2'"
                        ).fetchone() == ("bo",)
    assert sorted(json.loads(conn.execute(profile, ("user:ana",)).fetchone()[0])) == ["a1", "a3"]
    assert "a2" in json.loads(conn.execute(profile, ("user:bo",)).fetchone()[0])
    memory = Memory(store.path, config=config, embedder=completer.embedder)
    try:
        hits = memory.recall("anatok topic1 talks", k=20, users=["ana"])
        assert hits and {h.session_id for h in hits} <= {"a1", "a3"}
        assert "a2" in {h.session_id for h in memory.recall("anatok topic1", k=20,
                                                            users=["bo"])}
    finally:
        memory.close()
    store.close()
    app.close()


def build(db: Path) -> tuple[sqlite3.Connection, Store, RecordingCompleter, Config]:
    app = make_chat_file(db)
    config = config_for(db)
    store = open_sqlite(config)  # migrated: sessions rows carry a user
    for salt, (user, session, month) in enumerate(
            [("ana", "a1", 0), ("ana", "a2", 1), ("ana", "a3", 2), ("bo", "b1", 0),
             ("bo", "b2", 1)]):
        add_session(app, user, session, 8, month, False, salt)
    completer = RecordingCompleter(store)
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    return app, store, completer, config


def file_bytes(db: Path) -> bytes:
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def forgotten_words(app: sqlite3.Connection, where: str, args: tuple[object, ...]) -> set[str]:
    """The distinctive words of the turns about to be forgotten."""
    words: set[str] = set()
    for (content,) in app.execute(f"SELECT content FROM exchanges WHERE {where}", args):
        words |= set(re.findall(r"[a-z]+tok\d+x\d+", content))
    return words


def test_forget_a_session_erases_its_text_from_file_and_wal(db: Path) -> None:
    app, store, completer, config = build(db)
    words = forgotten_words(app, "session_id = 'a2'", ())
    assert words and all(w.encode() in file_bytes(db) for w in words)  # there before
    # The app keeps its connection open (a reader would stop the WAL being emptied).
    report = forget(store, Scope("ana", session="a2"), config.agent.id)
    assert report.turns == 8 and report.sessions_emptied == ["a2"] and report.wal_truncated
    data = file_bytes(db).lower()
    assert [w for w in words if w.encode() in data] == []
    conn = store.conn
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id = 'a2'").fetchone() == (0,)
    assert conn.execute("SELECT 1 FROM profile WHERE id = 'user:ana'").fetchone() is None
    # bo's memory is untouched.
    assert conn.execute("SELECT COUNT(*) FROM summaries WHERE user_id = 'bo'").fetchone() == (2,)
    assert conn.execute("SELECT 1 FROM profile WHERE id = 'user:bo'").fetchone()
    # A later pass re-derives ana's memory from what remains, and nothing else.
    result = run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
                      clock=lambda: LATER)
    assert not result.failed
    inputs = json.loads(conn.execute(
        "SELECT dreamd_inputs FROM profile WHERE id = 'user:ana'").fetchone()[0])
    assert sorted(inputs) == ["a1", "a3"]
    assert [m for (m,) in conn.execute(
        "SELECT month FROM eras WHERE user_id = 'ana' ORDER BY month")] == ["2026-01", "2026-03"]
    assert conn.execute("SELECT 1 FROM narrative WHERE id = 'user:ana'").fetchone()
    assert conn.execute("SELECT 1 FROM self_state WHERE id = 'assistant:user:ana'").fetchone()
    data = file_bytes(db).lower()
    assert [w for w in words if w.encode() in data] == []
    store.close()
    app.close()


def test_forget_before_a_date_trims_and_re_summarizes(db: Path) -> None:
    app, store, completer, config = build(db)
    cutoff = (T0 + timedelta(days=31 * 2, minutes=4, seconds=30)).isoformat()  # 3 turns of a3
    words = forgotten_words(app, "session_id LIKE 'a%' AND created_at < ?", (cutoff,))
    report = forget(store, Scope("ana", before=cutoff), config.agent.id)
    assert report.turns == 16 + 3 and sorted(report.sessions_emptied) == ["a1", "a2"]
    assert report.sessions_trimmed == ["a3"]
    assert [w for w in words if w.encode() in file_bytes(db).lower()] == []
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    conn = store.conn
    tally = conn.execute("SELECT turns, summarized_turns, first_id FROM dreamd_sessions "
                         "WHERE session_id = 'a3'").fetchone()
    first = conn.execute("SELECT MIN(id) FROM exchanges WHERE session_id = 'a3'").fetchone()[0]
    assert tally == (5, 5, first)
    gist = conn.execute("SELECT content FROM summaries WHERE session_id = 'a3'").fetchone()[0]
    assert not any(w in gist for w in words)
    store.close()
    app.close()


def dump(conn: Conn) -> dict[str, list[tuple[object, ...]]]:
    queries = {
        "exchanges": "SELECT id, session_id, content FROM exchanges ORDER BY id",
        "tally": "SELECT * FROM dreamd_sessions ORDER BY session_id",
        "sessions": "SELECT id, user_id FROM sessions ORDER BY id",
        "gists": "SELECT session_id FROM summaries ORDER BY session_id",
        "vectors": "SELECT model, exchange_id FROM dreamd_exchange_vectors ORDER BY 1, 2",
        "fts": "SELECT rowid FROM dreamd_fts ORDER BY rowid",
        "state": "SELECT key FROM dreamd_state WHERE key LIKE 'forget%'",
    }
    return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}


def test_forget_in_steps_of_two_turns_ends_where_one_step_does(tmp_path: Path) -> None:
    cutoff = (T0 + timedelta(days=31 * 2, minutes=4, seconds=30)).isoformat()
    ends = []
    for step in (2, 10_000):
        db = tmp_path / f"step{step}.db"
        app, store, _, config = build(db)
        words = forgotten_words(app, "session_id LIKE 'a%' AND created_at < ?", (cutoff,))
        report = forget(store, Scope("ana", before=cutoff), config.agent.id, step=step)
        assert report.turns == 19 and report.sessions_trimmed == ["a3"]
        assert [w for w in words if w.encode() in file_bytes(db).lower()] == []
        ends.append(dump(store.conn))
        store.close()
        app.close()
    assert ends[0] == ends[1]
    assert ends[0]["state"] == []  # the journal is closed


class HalfForgotten:
    """A file where `dreamd forget --user ana` was killed with SIGKILL half-way: 14 of
    ana's sessions and 2 of bo's, 600 turns each, embedded and indexed before. Built once
    per test session by `build`, whichever pytest worker comes first; each test works on a
    copy of its own."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.env = {"PYTHONPATH": str(ROOT), "DREAMD_EMBED__BACKEND": "hashing",
                    "PATH": "/usr/bin:/bin"}
        self.command = [sys.executable, "-m", "dreamd", "--db", str(db)]

    @classmethod
    def build(cls, where: Path) -> None:
        db = where / "big.db"
        app = make_chat_file(db)
        open_store(config_for(db)).close()  # sessions rows carry a user
        for s in range(16):
            owner = "ana" if s < 14 else "bo"
            app.execute("INSERT INTO sessions (id, created_at, user_id) VALUES (?, ?, ?)",
                        (f"{owner}{s}", T0.isoformat(), owner))
            app.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                            "VALUES (?, 'user', ?, ?)",
                            [(f"{owner}{s}", f"{owner}word{s}n{i} and some talk about the day",
                              (T0 + timedelta(minutes=i)).isoformat()) for i in range(600)])
        app.close()
        half = cls(db)
        half.dreamd("--force")  # turns embedded and in the full-text index
        killed = subprocess.Popen([*half.command, "forget", "--user", "ana"], env=half.env,
                                  cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        while half.journal() is None and killed.poll() is None:
            pass
        killed.kill()
        _, err = killed.communicate(timeout=10)
        assert half.journal() is not None, f"the forget ended before it was killed: {err}"

    def copy(self, where: Path) -> HalfForgotten:
        """The file as the kill left it (its WAL and shared memory too), elsewhere."""
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.db}{suffix}")
            if source.exists():
                shutil.copyfile(source, where / f"big.db{suffix}")
        return HalfForgotten(where / "big.db")

    def dreamd(self, *args: str) -> str:
        run = subprocess.run([*self.command, *args], env=self.env, cwd=ROOT, text=True,
                             capture_output=True, timeout=600)
        assert run.returncode == 0, run.stderr
        return run.stdout

    def journal(self) -> tuple[str] | None:
        with contextlib.closing(sqlite3.connect(self.db)) as look:  # a fresh snapshot
            return look.execute(
                "SELECT value FROM dreamd_state WHERE key = 'forget_pending'").fetchone()

    def count(self, sql: str) -> int:
        with contextlib.closing(sqlite3.connect(self.db)) as look:
            return int(look.execute(sql).fetchone()[0])


@pytest.fixture(scope="session")
def half_forgotten(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> HalfForgotten:
    where = built_once(tmp_path_factory, worker_id, "half-forgotten", HalfForgotten.build)
    return HalfForgotten(where / "big.db")


def test_a_forget_killed_half_way_is_finished_by_the_next_pass(
        half_forgotten: HalfForgotten, tmp_path: Path) -> None:
    half = half_forgotten.copy(tmp_path)
    assert "forget       unfinished for user 'ana'" in half.dreamd("status")
    half.dreamd("--force")  # finishes the forget before anything else
    with contextlib.closing(sqlite3.connect(half.db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id LIKE 'ana%'"
                            ).fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM exchanges").fetchone() == (1200,)  # bo's
        assert conn.execute("SELECT COUNT(*) FROM dreamd_exchange_vectors"
                            ).fetchone() == (1200,)
        assert conn.execute("SELECT COUNT(*) FROM dreamd_fts WHERE dreamd_fts MATCH 'and'"
                            ).fetchone() == (1200,)
        assert conn.execute("SELECT COUNT(*) FROM dreamd_fts "
                            "WHERE dreamd_fts MATCH 'anaword0n7'").fetchone() == (0,)
        assert conn.execute("SELECT key FROM dreamd_state WHERE key LIKE 'forget%'"
                            ).fetchall() == []
        assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone() == (2,)
    # Stale copies of rows can sit in unused parts of live pages, out of secure_delete's
    # reach (docs/how-to/privacy.md); --vacuum rewrites the file without them.
    half.dreamd("forget", "--user", "ana", "--vacuum")
    assert re.findall(rb"anaword\d+", file_bytes(half.db)) == []


def test_a_forget_started_over_an_unfinished_one_finishes_that_first(
        half_forgotten: HalfForgotten, tmp_path: Path) -> None:
    half = half_forgotten.copy(tmp_path)
    out = half.dreamd("forget", "--user", "bo")
    assert "forgot 1200 turns of user 'bo'" in out, out
    assert half.count("SELECT COUNT(*) FROM exchanges") == 0  # ana's went first
    assert half.count("SELECT COUNT(*) FROM dreamd_state WHERE key LIKE 'forget%'") == 0


def test_forget_dry_run_changes_nothing(db: Path) -> None:
    app, store, _, config = build(db)
    before = file_bytes(db)
    report = forget(store, Scope("ana"), config.agent.id, dry_run=True)
    assert report.turns == 24 and len(report.sessions_emptied) == 3
    assert "profile:user:ana" in report.derived
    assert store.conn.execute("SELECT COUNT(*) FROM exchanges").fetchone() == (40,)
    assert file_bytes(db) == before
    store.close()
    app.close()


def rows_of(conn: Conn, user: str) -> dict[str, set[Any]]:
    """Every row the file holds for `user`, found independently of dreamd.export."""
    sessions = {s for (s,) in conn.execute("SELECT id FROM sessions WHERE user_id = ?", (user,))}
    marks = ",".join("?" * len(sessions))
    turns = {i for (i,) in conn.execute(
        f"SELECT id FROM exchanges WHERE session_id IN ({marks})", tuple(sessions))}
    return {
        "sessions": sessions,
        "turns": turns,
        "turn_vectors": {i for (i,) in conn.execute(
            "SELECT exchange_id FROM dreamd_exchange_vectors") if i in turns},
        "fts": {i for (i,) in conn.execute("SELECT rowid FROM dreamd_fts") if i in turns},
        "gists": {s for (s,) in conn.execute("SELECT session_id FROM summaries WHERE user_id = ?",
                                            (user,))},
        "eras": {m for (m,) in conn.execute("SELECT month FROM eras WHERE user_id = ?", (user,))},
        "profile": {c for (c,) in conn.execute("SELECT content FROM profile WHERE user_id = ?",
                                              (user,))},
        "narrative": {c for (c,) in conn.execute(
            "SELECT content FROM narrative WHERE user_id = ?", (user,))},
        "facts": {i for (i,) in conn.execute("SELECT id FROM facts WHERE user_id = ?", (user,))},
    }


def test_export_lists_every_row_of_the_user(db: Path) -> None:
    app, store, _, config = build(db)
    doc = json.loads(json.dumps(export_user(store, "ana", config.agent.id)))
    want = rows_of(store.conn, "ana")
    turns = [t for s in doc["sessions"] for t in s["turns"]]
    got = {
        "sessions": {s["id"] for s in doc["sessions"]},
        "turns": {t["id"] for t in turns},
        "turn_vectors": {t["id"] for t in turns if t["vectors"]},
        "fts": {t["id"] for t in turns if t["in_search_index"]},
        "gists": {g["session_id"] for g in doc["gists"]},
        "eras": {e["month"] for e in doc["eras"]},
        "profile": {doc["profile"]["content"]},
        "narrative": {doc["narrative"]["content"]},
        "facts": {f["id"] for f in doc["facts"]},
    }
    assert got == want and len(want["turns"]) == 24
    for fact in doc["facts"]:  # each fact names the turns it came from, all of them ana's
        assert fact["from_turns"] and set(fact["from_turns"]) <= want["turns"]
    # Provenance: each derived row names the turns it came from, all of them ana's.
    for gist in doc["gists"]:
        assert gist["made_from_turns"] and set(gist["made_from_turns"]) <= want["turns"]
        assert gist["made_by"].startswith("extractive:")
    assert set(doc["profile"]["made_from_turns"]) == want["turns"]
    jan = next(e for e in doc["eras"] if e["month"] == "2026-01")
    a1 = {t["id"] for s in doc["sessions"] if s["id"] == "a1" for t in s["turns"]}
    assert set(jan["made_from_turns"]) == a1
    assert doc["reflection"]["made_from_turns_through"] >= max(want["turns"])
    assert "botok" not in json.dumps(doc)
    store.close()
    app.close()


def run_cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_cli_forget_export_and_bad_input(db: Path, tmp_path: Path) -> None:
    app, store, _, _ = build(db)
    store.close()
    app.close()
    out = tmp_path / "ana.json"
    done = run_cli(db, "export", "--user", "ana", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["user"] == "ana"
    bad = run_cli(db, "forget", "--user", "ana", "--before", "last tuesday")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("Error: --before: 'last tuesday'")
    dry = run_cli(db, "forget", "--user", "ana", "--session", "a1", "--dry-run")
    assert dry.returncode == 0 and "would forget 8 turns" in dry.stdout
    gone = run_cli(db, "forget", "--user", "ana", "--session", "a1", "--vacuum", "--json")
    assert gone.returncode == 0, gone.stderr
    report = json.loads(gone.stdout)
    assert report["turns"] == 8 and report["vacuumed"] and report["wal_truncated"]
    assert b"anatok0x" not in file_bytes(db)
    missing = run_cli(tmp_path / "nope.db", "export", "--user", "ana")
    assert missing.returncode == 2 and missing.stdout == ""


def test_a_forget_during_a_pass_wins(db: Path) -> None:
    """Another process forgets ana while the pass waits on the backend for her gist: the
    gist made from the forgotten turns is not saved, and the pass stops."""
    app = make_chat_file(db)
    config = config_for(db)
    store = open_sqlite(config)
    add_session(app, "ana", "a1", 8, 0, False, 0)
    add_session(app, "bo", "b1", 8, 0, False, 1)

    class ForgetsMidway(RecordingCompleter):
        def complete(self, prompt):
            if prompt.task == "summarize" and "anatok" in prompt.user and not self.prompts:
                other = open_store(config)
                forget(other, Scope("ana"), config.agent.id)
                other.close()
            return super().complete(prompt)

    completer = ForgetsMidway(store)
    result = run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
                      clock=lambda: LATER)
    conn = store.conn
    assert conn.execute("SELECT COUNT(*) FROM summaries WHERE user_id = 'ana'").fetchone() == (0,)
    assert conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id = 'a1'").fetchone() == (0,)
    assert conn.execute("SELECT COUNT(*) FROM dreamd_sessions WHERE user_id = 'ana'"
                        ).fetchone() == (0,)
    assert any("forgotten during this pass" in j.reason for j in result.jobs)
    assert b"anatok0x" not in file_bytes(db)
    # The next pass finishes bo's memory as usual.
    run_pass(store, config, completer.embedder, completer, trigger="t", force=True,
             clock=lambda: LATER)
    assert conn.execute("SELECT user_id FROM summaries").fetchall() == [("bo",)]
    assert conn.execute("SELECT 1 FROM profile WHERE id = 'user:bo'").fetchone()
    store.close()
    app.close()


def test_library_forget_and_export(db: Path) -> None:
    app, store, completer, config = build(db)
    store.close()
    memory = Memory(db, config=config, embedder=completer.embedder)
    assert [h.session_id for h in memory.recall("anatok2x3", k=3)] == []  # not the default user's
    assert "a3" in {h.session_id for h in memory.recall("anatok2x3", k=5, users=["ana"])}
    report = memory.forget("ana", session="a3")
    assert report.turns == 8
    assert all(h.session_id != "a3" for h in memory.recall("anatok2x3", k=10, users=["ana"]))
    assert {s["id"] for s in memory.export("ana")["sessions"]} == {"a1", "a2"}
    memory.close()
    app.close()

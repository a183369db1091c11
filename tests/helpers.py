"""Test doubles and builders shared by the suite: fakes of our protocols, real files,
the daemon as a subprocess, and the OpenAI-compatible test server's client side."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.protocols import Embedder
from dreamd.config import CompleterConfig, Config, EmbedConfig
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.dream.prompts import summary_prompt
from dreamd.models import Completion, Prompt
from dreamd.store.interface import Store
from dreamd.store.opening import open_store
from dreamd.store.sqlite.schema import CORE_TABLES
from dreamd.store.sqlite.store import SqliteStore
from testkit.openai_server import FakeOpenAI
from testkit.served import env_for

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def sqlite(store: Store) -> SqliteStore:
    """The SQLite engine behind a store, for tests that look at the file's rows."""
    assert isinstance(store, SqliteStore), store
    return store


def open_sqlite(config: Config, create: bool = True) -> SqliteStore:
    return sqlite(open_store(config, create=create))


def config_for(db: Path, **sections: Any) -> Config:
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"))
    return dataclasses.replace(config, **sections) if sections else config


class InTransactionError(AssertionError):
    """The Completer was called while dreamd's connection held a transaction."""


@dataclass
class RecordingCompleter:
    """Delegates to the extractive backend; records prompts; refuses to run in a transaction.

    `fail_on` makes calls whose prompt text contains a marker raise, to test failures.
    """

    store: Store | None
    embedder: HashingEmbedder = field(default_factory=HashingEmbedder)
    fail_on: set[str] = field(default_factory=set)
    name: str = "extractive"
    prompts: list[Prompt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner = ExtractiveCompleter(self.embedder)
        self.model = self.inner.model

    def complete(self, prompt: Prompt) -> Completion:
        if self.store is not None and self.store.in_transaction:
            raise InTransactionError(f"complete({prompt.task}) called inside a transaction")
        self.prompts.append(prompt)
        for marker in self.fail_on:
            if marker in prompt.user:
                raise RuntimeError(f"backend refused {marker}")
        return self.inner.complete(prompt)


def make_chat_file(path: Path) -> sqlite3.Connection:
    """A memory file as a chat app creates it: core tables, WAL, autocommit."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(CORE_TABLES)
    return conn


def add_turns(
    conn: sqlite3.Connection, session: str, texts: list[str], start: datetime = T0,
    roles: tuple[str, str] = ("user", "assistant"),
) -> list[int]:
    ids = []
    conn.execute("BEGIN IMMEDIATE")
    for i, text in enumerate(texts):
        cur = conn.execute(
            "INSERT INTO exchanges (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            (session, roles[i % 2], text, (start + timedelta(minutes=i)).isoformat()),
        )
        ids.append(int(cur.lastrowid or 0))
    conn.execute("COMMIT")
    return ids


TOPICS = ("hiking in the mountains with my sister", "learning to bake sourdough bread",
          "a new job at the hospital", "my cat Miso who is sick", "planning a trip to Japan",
          "practising guitar every evening", "moving to a flat near the river")


def chat_texts(session_index: int, n: int) -> list[str]:
    topic = TOPICS[session_index % len(TOPICS)]
    return [
        f"Turn {i} of session {session_index}: I keep thinking about {topic}, detail {i}."
        if i % 2 == 0 else f"Reply {i}: tell me more about {topic}."
        for i in range(n)
    ]


def derived_digest(path: Path) -> str:
    """A hash of every derived row dreamd writes (not the run log), to prove 'wrote nothing'."""
    conn = sqlite3.connect(path)
    h = hashlib.sha256()
    for table in ("summaries", "profile", "eras", "narrative", "self_state",
                  "dreamd_exchange_vectors", "dreamd_vectors", "dreamd_sessions",
                  "dreamd_failures", "dreamd_embed_state", "dreamd_state"):
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
            h.update(repr(row).encode())
    conn.close()
    return h.hexdigest()


ROOT = Path(__file__).parent.parent


def dreamd_env(**extra: str) -> dict[str, str]:
    return env_for(**extra)


def big_file(db: Path, sessions: int, turns_each: int) -> None:
    conn = make_chat_file(db)
    for s in range(sessions):
        add_turns(conn, f"s{s:05d}", chat_texts(s, turns_each))
    conn.close()


def start(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), *args], cwd=ROOT,
                            env=env or dreamd_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def query(db: Path, sql: str, default: Any = None) -> Any:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:
        return default  # not migrated yet
    finally:
        conn.close()


def built_once(tmp_path_factory: Any, worker_id: str, name: str,
               build: Callable[[Path], None]) -> Path:
    """A directory `build` fills once per test session, shared by the pytest-xdist workers
    (the first to take the lock builds it; the rest wait and reuse it). Tests that change
    what is in it work on a copy."""
    if worker_id == "master":  # one process: its own session-scoped directory
        where = tmp_path_factory.mktemp(name)
        build(where)
        return where
    root = tmp_path_factory.getbasetemp().parent  # shared by the workers of one run
    where, done = root / name, root / f"{name}.built"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(where, ignore_errors=True)  # a build that failed half-way
            where.mkdir()
            build(where)
            done.touch()
    return where


def wait_for(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def notify_socket(tmp_path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(0.1)
    return sock


def messages_until(sock: socket.socket, done: Callable[[list[tuple[float, str]]], bool],
                   timeout: float = 60.0) -> list[tuple[float, str]]:
    """The notify messages until `done` holds for them (a condition, not a clock: a busy
    machine only makes it take longer); raises if it never does within `timeout`."""
    out: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    while not done(out):
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout} s: {[m for _, m in out][-20:]}")
        try:
            out.append((time.monotonic(), sock.recv(4096).decode()))
        except TimeoutError:
            out.append((time.monotonic(), ""))  # a tick, so `done` can judge silences
    return [(t, m) for t, m in out if m]


def silent_for(seconds: float,
               message: str = "WATCHDOG=1") -> Callable[[list[tuple[float, str]]], bool]:
    """A `done` for messages_until: `message` has not come for `seconds`."""
    def done(seen: list[tuple[float, str]]) -> bool:
        if not seen:
            return False
        last = max((t for t, m in seen if m == message), default=seen[0][0])
        return seen[-1][0] - last >= seconds
    return done


PRIOR_ART_DDL = """
CREATE TABLE IF NOT EXISTS exchanges (
id INTEGER PRIMARY KEY AUTOINCREMENT,
session_id TEXT NOT NULL,
role TEXT NOT NULL,
content TEXT NOT NULL,
embedding BLOB NOT NULL,
created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_session_created ON exchanges(session_id, created_at);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, name TEXT, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS summaries (
session_id TEXT PRIMARY KEY, content TEXT NOT NULL, embedding BLOB NOT NULL,
last_exchange_id INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS profile (
id TEXT PRIMARY KEY, content TEXT NOT NULL, sessions_covered INTEGER NOT NULL,
updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS eras (
month TEXT PRIMARY KEY, content TEXT NOT NULL, embedding BLOB NOT NULL,
session_count INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS narrative (id TEXT PRIMARY KEY, content TEXT NOT NULL,
updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS self_state (id TEXT PRIMARY KEY, data TEXT NOT NULL,
updated_at TEXT NOT NULL);
"""


KEY = "sk-test-DO-NOT-LEAK-4f1c2b"


PROMPT = summary_prompt({"user": "U", "agent": "A"}, None, ["user: hi", "assistant: hello"], 4)


def completer_config(server: FakeOpenAI, **changes: Any) -> CompleterConfig:
    base = CompleterConfig(backend="openai", base_url=server.base_url, model="test-model",
                           read_timeout_seconds=0.5, connect_timeout_seconds=0.5,
                           call_deadline_seconds=4, retries=3, retry_after_cap_seconds=5,
                           breaker_failures=4, breaker_cooldown_seconds=1.0, workers=1)
    return dataclasses.replace(base, **changes)


def completer(server: FakeOpenAI, **changes: Any) -> OpenAICompleter:
    return OpenAICompleter(completer_config(server, **changes), environ={"OPENAI_API_KEY": KEY})


def kept(embedder: Embedder, speaker: str, text: str, addressee: str | None = "Wren",
         previous: str = "", said_at: str = "2026-07-12T20:15:00+00:00") -> list[str]:
    """The facts one turn leaves, offline: what extraction proposes and the selector keeps."""
    from dreamd.dream.selector import chosen, worth_a_run
    from dreamd.text.facts import extract

    found = extract(speaker, text, said_at, addressee, previous)
    looked = worth_a_run([c.statement for c in found], embedder)
    found = [c for c, worth in zip(found, looked, strict=True) if worth]
    if not found:
        return []
    vectors = embedder.embed([c.statement for c in found])
    keep = chosen([(c.subject, c.statement) for c in found], vectors, embedder.model)
    return [c.statement for c, k in zip(found, keep, strict=True) if k]

"""Test doubles and builders shared by the suite: fakes of our protocols, real files."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dreamd.backends.extractive import ExtractiveCompleter
from dreamd.backends.hashing import HashingEmbedder
from dreamd.config import Config, EmbedConfig
from dreamd.models import Completion, Prompt
from dreamd.store.connect import Store
from dreamd.store.migrations import CORE_TABLES

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def config_for(db: Path, **sections: object) -> Config:
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
        if self.store is not None and self.store.conn.in_transaction:
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

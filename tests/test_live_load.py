"""Consolidation keeps up next to a busy chat app: every due job gets its turn in a pass."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from dreamd.config import PassConfig
from dreamd.dream.cycle import run_pass
from tests.helpers import (
    T0,
    RecordingCompleter,
    config_for,
    make_chat_file,
    open_sqlite,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class SlowEmbedder:
    """The hashing embedder at the speed of a remote embedding endpoint: 50 ms a call."""

    delay: float = 0.05
    calls: int = 0
    on_call: object = None

    def __post_init__(self) -> None:
        from dreamd.backends.hashing import HashingEmbedder

        self.inner = HashingEmbedder()
        self.dim, self.model = self.inner.dim, self.inner.model

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if callable(self.on_call):
            self.on_call(self.calls)
        time.sleep(self.delay)
        return self.inner.embed(texts)


def backlog(db: Path, sessions: int, turns: int) -> None:
    """`sessions` x `turns` of history spread over four months, as an import leaves it."""
    conn = make_chat_file(db)
    conn.execute("BEGIN")
    for s in range(sessions):
        start = T0 - timedelta(days=120) + timedelta(hours=6 * s)
        conn.executemany(
            "INSERT INTO exchanges (session_id, role, content, created_at) VALUES (?,?,?,?)",
            [(f"old-{s}", "user" if i % 2 == 0 else "assistant",
              f"Session {s} turn {i}: I told you about my sister's bakery and the race {s % 9}.",
              (start + timedelta(minutes=i)).isoformat()) for i in range(turns)])
    conn.execute("COMMIT")
    conn.close()


def live_turns(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as look:
        return int(look.execute(
            "SELECT COUNT(*) FROM exchanges WHERE session_id LIKE 'live-%'").fetchone()[0])


def test_a_busy_app_does_not_starve_the_jobs_after_embed(tmp_path: Path) -> None:
    """20,000 turns of backlog, embeddings at 50 ms a call, and a chat app writing 60
    turns a second: within one time-limited pass every tier gets built."""
    db = tmp_path / "memory.db"
    backlog(db, sessions=500, turns=40)
    stop, report = tmp_path / "stop", tmp_path / "writer.json"
    writer = subprocess.Popen(
        [sys.executable, "-m", "bench.chat_writer", str(db), "60", str(stop), str(report)],
        cwd=ROOT)
    try:
        assert wait_for(lambda: live_turns(db) > 0, 60)  # the writer is writing
        config = config_for(db, pass_=PassConfig(max_seconds=8.0))
        store = open_sqlite(config)
        embedder = SlowEmbedder()
        completer = RecordingCompleter(store, embedder=embedder.inner)
        result = run_pass(store, config, embedder, completer, trigger="test", force=True)
        conn = store.conn
        counts = {table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                  for table in ("summaries", "profile", "eras", "narrative", "self_state")}
        embedded = conn.execute("SELECT last_exchange_id FROM dreamd_embed_state").fetchone()[0]
        store.close()
    finally:
        stop.touch()
        writer.wait(30)
    written = json.loads(report.read_text())
    assert len(written["ids"]) > 300 and not written["errors"]
    ran = {r.job: r for r in result.jobs}
    assert all(ran[job].ran for job in ran), [r.as_dict() for r in result.jobs]
    assert counts["summaries"] > 0 and counts["profile"] > 0 and counts["eras"] > 0
    assert counts["narrative"] > 0 and counts["self_state"] > 0, counts
    # embed worked up to the turn it sensed at the start, not after the app's new turns
    assert 0 < embedded <= result.stats_before.max_exchange_id
    assert result.outcome == "partial", [r.as_dict() for r in result.jobs if r.errors or r.failed]


def test_embed_stops_when_a_forget_lands_mid_pass(tmp_path: Path) -> None:
    """A forget from another process during embedding: the pass stops saving and ends
    the job at once instead of calling the embedder until its budget runs out."""
    db = tmp_path / "memory.db"
    backlog(db, sessions=40, turns=40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env.update(PYTHONPATH=str(ROOT), DREAMD_EMBED__BACKEND="hashing")
    forgot: list[int] = []
    writes_at_forget: list[int] = []

    def forget_from_outside(call: int) -> None:
        if call == 3:
            subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "forget",
                            "--user", "default", "--session", "old-0"],
                           check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)
            forgot.append(call)
            writes_at_forget.append(store.lock_times.writes)

    # A budget no loaded machine runs out of: the pass must end because of the forget.
    config = config_for(db, pass_=PassConfig(max_seconds=600.0))
    store = open_sqlite(config)
    embedder = SlowEmbedder(delay=0.01, on_call=forget_from_outside)
    result = run_pass(store, config, embedder, RecordingCompleter(store, embedder=embedder.inner),
                      trigger="test", force=True)
    writes = store.lock_times.writes
    store.close()
    assert forgot == [3]
    assert embedder.calls <= 4, embedder.calls
    # Nor does it go on opening write transactions it no longer saves in (the words
    # index's loop once did, until the budget ran out): the one that found the forget
    # and the pass's own records, three here.
    assert writes - writes_at_forget[0] <= 4, writes - writes_at_forget[0]
    assert "forgotten" in {r.job: r for r in result.jobs}["summarize"].reason
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id = 'old-0'"
                            ).fetchone() == (0,)

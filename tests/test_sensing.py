"""Sensing between passes costs what waits, not what the store holds: on SQLite the tally
is read from its indexes alone; on PostgreSQL an idle look is a few statements, the reads
that need no other statement's view each travelling with its own transaction."""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from datetime import UTC, datetime
from typing import Any

import pytest

from dreamd.dream.sensing import read_backlog, sync_owners
from dreamd.errors import StoreError
from dreamd.memory.api import Memory
from dreamd.store.tally import sync_tally
from tests.engines import App
from tests.test_engines import config_of, dream, two_users

NOW = datetime(2024, 3, 2, tzinfo=UTC)


def kept_up(target: str) -> tuple[Memory, App]:
    """Two users' sessions, a pass over them, and one more turn since."""
    memory = Memory(target, config=config_of(target))
    app = App(target)
    two_users(memory, app)
    dream(memory)
    app.say("ana-1", [("user", "Rui and I moved to Porto in May.")])
    memory.store.settle_turns(wait=5.0)
    return memory, app


def look(memory: Memory) -> Any:
    """What a pass does before it decides: fold new turns in, sense, check owners."""
    sync_tally(memory.store)
    stats = read_backlog(memory.store, memory.config, NOW, memory.embedder.model)
    sync_owners(memory.store, memory.config.agent.id)
    return stats


def test_sqlite_sensing_reads_the_tally_from_its_indexes_alone(tmp_path: Any) -> None:
    """Every statement sensing runs on the tally is answered by a covering index (or a
    count of one): none looks up each waiting session's row in the table."""
    memory, app = kept_up(str(tmp_path / "memory.db"))
    ran: list[str] = []
    raw: sqlite3.Connection = memory.store.conn  # type: ignore[attr-defined]
    raw.set_trace_callback(ran.append)
    stats = look(memory)
    raw.set_trace_callback(None)
    assert stats.dirty == 1 and stats.turns_without_facts == 1  # the turn since the pass
    tally = [sql for sql in ran if "dreamd_sessions" in sql and sql.lstrip().startswith("SELECT")]
    assert len(tally) >= 3, ran  # the sessions, the dirty ones, the unread ones
    plans = {sql: [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}")] for sql in tally}
    reads_rows = {sql: plan for sql, plan in plans.items()
                  if any(re.search(r"\bdreamd_sessions\b(?! USING COVERING INDEX)", step)
                         for step in plan)}
    assert reads_rows == {}
    memory.close()
    app.close()


def test_an_idle_look_on_postgresql_is_few_statements(pg_server: Any) -> None:
    """Folding nothing new, sensing and finding no owner to check: eight statements (on
    724f86e, fourteen), each a message the client waits on."""
    memory, app = kept_up(str(pg_server.new_database()))
    look(memory)  # folds the turn in
    from psycopg.pq import Trace

    pgconn = memory.store.raw.pgconn  # type: ignore[attr-defined]
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        stats = look(memory)
        pgconn.untrace()
        os.fsync(trace.fileno())
        trace.seek(0)
        sent = [ln for ln in trace.read().splitlines() if re.match(r"F\t\d+\tQuery\t", ln)]
    assert stats.dirty == 1 and stats.turns_without_facts == 1
    assert len(sent) <= 8, "\n".join(sent)
    memory.close()
    app.close()


def test_a_peek_that_fails_leaves_no_transaction_open(target: str) -> None:
    """A read of its own: its rows (a literal % kept as written), or its error with the
    store left as it was, ready for the next read and write."""
    memory = Memory(target, config=config_of(target))
    store = memory.store
    assert store.peek("SELECT ?, '100%'", (7,)) == [(7, "100%")]
    with pytest.raises((StoreError, sqlite3.Error, Exception)) as failed:
        store.peek("SELECT no_such_column FROM dreamd_state")
    assert "no_such_column" in str(failed.value)
    assert not store.in_transaction
    with store.write() as conn:
        conn.execute("INSERT INTO dreamd_state (key, value) VALUES ('peeked', '1')")
    assert store.peek("SELECT value FROM dreamd_state WHERE key = ?", ("peeked",)) == [("1",)]
    memory.close()

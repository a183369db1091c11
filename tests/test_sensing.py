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
from tests.test_engines import config_of, dream, opened, two_users

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
    assert tally, ran  # the sessions, the dirty ones, the unread ones (one statement)
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


def counted(app: App) -> list[tuple[Any, ...]]:
    """Each user's count of sessions as dreamd keeps it, and as a recount finds it."""
    kept = app.rows("SELECT user_id, sessions FROM dreamd_user_sessions "
                    "WHERE sessions != 0 ORDER BY 1")
    recount = app.rows("SELECT user_id, COUNT(*) FROM dreamd_sessions GROUP BY user_id "
                       "ORDER BY 1")
    assert kept == recount
    return kept


def test_each_users_count_of_sessions_follows_every_change(target: str) -> None:
    """The sessions sensing counts are kept per user as the tally changes: a fold, a pass
    (gists, facts), turns that came before their sessions row, a session the app moves,
    a partial forget and a whole one. At every step the kept counts equal a recount."""
    memory, app = opened(target)
    two_users(memory, app)
    app.say("dx-1", [("user", "Turns before their session's row."), ("assistant", "So.")])
    sync_tally(memory.store)
    assert counted(app) == [("ana", 1), ("bo", 1), ("default", 1)]
    app.session("dx-1", "cy")
    dream(memory)  # the owner check moves dx-1 to cy
    assert counted(app) == [("ana", 1), ("bo", 1), ("cy", 1)]
    app.session("ana-2", "ana")
    app.say("ana-2", [("user", "Rui and I moved to Porto in May."), ("assistant", "Nice.")],
            at="2024-03-05T10:00:00+00:00")
    app.execute("UPDATE sessions SET user_id = 'cy' WHERE id = 'bo-1'")
    dream(memory)
    assert counted(app) == [("ana", 2), ("cy", 2)]
    memory.forget("ana", before="2024-03-03")  # ana-1 goes, ana-2 stays
    assert counted(app) == [("ana", 1), ("cy", 2)]
    memory.forget("cy", session="dx-1")
    memory.forget("ana")
    assert counted(app) == [("cy", 1)]
    stats = read_backlog(memory.store, memory.config, NOW, memory.embedder.model)
    scoped = read_backlog(memory.store, memory.config, NOW, memory.embedder.model,
                          users=["cy", "ana"])
    assert stats.sessions == scoped.sessions == 1
    memory.close()
    app.close()


def sensing_statements(memory: Memory) -> list[str]:
    """The statements an idle look sends that read dreamd_sessions, as sent."""
    look(memory)  # folds the turn in
    if memory.store.engine == "sqlite":
        ran: list[str] = []
        raw: sqlite3.Connection = memory.store.conn  # type: ignore[attr-defined]
        raw.set_trace_callback(ran.append)
        look(memory)
        raw.set_trace_callback(None)
    else:
        from psycopg.pq import Trace

        pgconn = memory.store.raw.pgconn  # type: ignore[attr-defined]
        with tempfile.TemporaryFile("w+") as trace:
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
            look(memory)
            pgconn.untrace()
            os.fsync(trace.fileno())
            trace.seek(0)
            found = (re.match(r'F\t\d+\tQuery\t "(.*)"$', ln) for ln in trace.read().splitlines())
            ran = [part.strip() for m in found if m for part in m.group(1).split(";")]
    return [sql for sql in ran if re.search(r"\bdreamd_sessions\b", sql)
            and sql.lstrip().upper().startswith("SELECT")]


def scans(plan: Any) -> list[dict[str, Any]]:
    """Every node of a PostgreSQL plan (EXPLAIN's JSON)."""
    nodes = [plan[0]["Plan"]] if isinstance(plan, list) else [plan]
    out = []
    while nodes:
        node = nodes.pop()
        out.append(node)
        nodes += node.get("Plans", [])
    return out


def indexes_of(node: dict[str, Any]) -> set[str]:
    """The indexes a scan reads: its own, or those of the bitmaps it is built from; none
    (an empty name) for a sequential scan."""
    if node["Node Type"] == "Bitmap Heap Scan":
        return {n["Index Name"] for n in scans(node) if "Index Name" in n}
    return {node.get("Index Name", "")}


def test_an_idle_look_reads_only_the_waiting_sessions(target: str) -> None:
    """Sensing reads dreamd_sessions only through the partial indexes of the sessions that
    wait (for a gist, for facts): never every session the store holds, however many.
    (The test's tables are small, so PostgreSQL's plans are taken with sequential scans
    priced out: what is checked is that the statement has no need of one.)"""
    memory, app = kept_up(target)
    statements = sensing_statements(memory)
    assert statements
    whole: list[str] = []
    if memory.store.engine == "sqlite":
        partial = {r[0] for r in app.rows("SELECT name FROM sqlite_master WHERE type = "
                                          "'index' AND tbl_name = 'dreamd_sessions' "
                                          "AND sql LIKE '% WHERE %'")}
        for sql in statements:
            for row in app.conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                step = row[3]
                index = re.search(r"\bdreamd_sessions\b.*INDEX (\w+)", step)
                if re.search(r"\bdreamd_sessions\b", step) and (
                        index is None or index.group(1) not in partial):
                    whole.append(step)
    else:
        partial = {r[0] for r in app.rows("SELECT indexname FROM pg_indexes WHERE tablename = "
                                          "'dreamd_sessions' AND indexdef LIKE '% WHERE %'")}
        app.execute("SET enable_seqscan = off")
        for sql in statements:
            whole += [node["Node Type"] for node in scans(app.value(f"EXPLAIN (FORMAT JSON) {sql}"))
                      if node.get("Relation Name") == "dreamd_sessions"
                      and not indexes_of(node) <= partial]
    assert whole == [], statements
    memory.close()
    app.close()


def test_a_store_set_up_before_the_counts_gains_them(target: str) -> None:
    """A store dreamd set up before migration 15 (its tally already holding sessions) is
    brought up to it at the next start: each user's count is what a recount finds, and
    from then on kept."""
    memory, app = opened(target)
    two_users(memory, app)
    sync_tally(memory.store)
    memory.close()
    if memory.store.engine == "sqlite":
        for name in ("added", "gone", "moved"):
            app.execute(f"DROP TRIGGER dreamd_user_sessions_{name}")
    else:
        app.execute("DROP FUNCTION dreamd_count_user_sessions() CASCADE")
    app.execute("DROP TABLE dreamd_user_sessions")
    app.execute("DELETE FROM dreamd_migrations WHERE version >= 15")
    memory = Memory(target, config=config_of(target))
    assert counted(app) == [("ana", 1), ("bo", 1)]
    app.session("cy-1", "cy")
    app.say("cy-1", [("user", "I am Cy.")])
    memory.store.settle_turns(wait=5.0)
    sync_tally(memory.store)
    assert counted(app) == [("ana", 1), ("bo", 1), ("cy", 1)]
    memory.close()
    app.close()

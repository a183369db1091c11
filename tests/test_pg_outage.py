"""The PostgreSQL server goes away and comes back (a restart, a failover, a pooler's idle
timeout): every connection dreamd held is closed under it. The library and the daemon
carry on once the server is back, on connections of their own opened again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.config import Config, EmbedConfig, PassConfig, WorkersConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.dream.workers import Claims
from dreamd.memory.api import Memory
from dreamd.models import Completion, Prompt
from dreamd.store.opening import open_store
from dreamd.store.state import get_state, set_state
from tests.engines import App
from tests.helpers import dreamd_env, wait_for

ROOT = Path(__file__).resolve().parent.parent


def test_memory_carries_on_after_the_server_restarts(pg_server: Any) -> None:
    url = pg_server.new_database()
    memory = Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing")))
    try:
        memory.remember("s1", "user", "My sister Ana lives in Porto.", embed=True)
        assert [h.content for h in memory.recall("Where does Ana live?", k=1)]
        pg_server.restart()
        memory.remember("s1", "user", "I bought a green bicycle yesterday.", embed=True)
        hits = memory.recall("What colour is the bicycle?", k=2)
        assert any("bicycle" in h.content for h in hits)
    finally:
        memory.close()


def test_store_reopens_between_transactions_never_inside_one(pg_server: Any) -> None:
    """After a restart, the first look (settling turns, outside a transaction) and the
    next transactions work. A connection dropped inside a write fails that write whole:
    nothing of it lands, and nothing after the drop runs outside a transaction."""
    url = pg_server.new_database()
    store = open_store(Config(db=url))
    try:
        store.settle_turns()
        pg_server.restart()
        assert store.settle_turns() == 0
        with store.write() as conn:
            set_state(conn, "before", "1")
        with pytest.raises(psycopg.OperationalError), store.write() as conn:
            set_state(conn, "torn", "1")
            pg_server.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = 'dreamd'")
            set_state(conn, "after", "1")
        with store.read() as conn:
            assert get_state(conn, "before") == "1"
            assert get_state(conn, "torn") is None
            assert get_state(conn, "after") is None
    finally:
        store.close()


class HeldCompleter:
    """The extractive completer, whose calls wait until the test lets them go: a pass held
    in the middle of a batch, its users claimed."""

    name = "extractive"

    def __init__(self, embedder: HashingEmbedder) -> None:
        self.inner = ExtractiveCompleter(embedder)
        self.model = self.inner.model
        self.called = threading.Event()
        self.go = threading.Event()

    def complete(self, prompt: Prompt) -> Completion:
        self.called.set()
        assert self.go.wait(120), "the test never let the call go"
        return self.inner.complete(prompt)


def cat_owners(url: str, users: int) -> None:
    """`users` users, a session each, their turns waiting for a pass."""
    Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing"))).close()
    app = App(url)
    for n in range(users):
        app.session(f"s{n}", f"u{n}")
        app.turns(f"s{n}", [f"I adopted a cat called Mika{n}.", "How is she settling in?",
                            "She sleeps on the balcony all day.", "Cats love the sun."],
                  datetime(2024, 3, 1, 10, 0))
    app.close()


def held_by(url: str, worker: str) -> int:
    """Unexpired leases `worker` holds, in the server's clock."""
    app = App(url)
    try:
        return int(app.value("SELECT COUNT(*) FROM dreamd_leases WHERE worker = ? AND "
                             "expires_at > now()", (worker,)))
    finally:
        app.close()


def test_a_pass_the_server_cuts_short_leaves_no_lease_renewed(pg_server: Any) -> None:
    """The server goes down while a worker's pass holds users (the pass fails: it cannot
    hand them back), and comes back before their leases would run out. The worker's
    heartbeat renews none of them: the pass that held them is over. And the worker's next
    pass consolidates those users."""
    url = pg_server.new_database()
    cat_owners(url, 3)
    lease = 10.0
    config = Config(db=url, embed=EmbedConfig(backend="hashing"),
                    workers=WorkersConfig(lease_seconds=lease))
    store = open_store(config)
    embedder = HashingEmbedder()
    claims = Claims(store, config)
    claims.start()
    try:
        held = HeldCompleter(embedder)
        with ThreadPoolExecutor(1) as pool:
            cut = pool.submit(run_pass, store, config, embedder, held, trigger="test",
                              force=True, claims=claims)
            assert held.called.wait(60), "the pass never reached the completer"
            assert held_by(url, claims.worker) == 3
            pg_server.down()
            held.go.set()
            assert cut.exception(timeout=120) is not None, "the pass outlived its server"
        pg_server.up()
        # Released once the server answers, or at worst left to run out: never renewed.
        assert wait_for(lambda: held_by(url, claims.worker) == 0, 3 * lease, step=0.5), \
            "the heartbeat kept renewing the leases of a pass that was over"
        result = run_pass(store, config, embedder, held, trigger="test", force=True,
                          claims=claims)
        assert result.outcome == "ok", result
        app = App(url)
        try:
            assert app.value("SELECT COUNT(*) FROM summaries") == 3
        finally:
            app.close()
        assert held_by(url, claims.worker) == 0
    finally:
        claims.stop()
        store.close()


def test_a_workers_pass_indexes_the_words_a_cut_pass_left_behind(pg_server: Any) -> None:
    """A worker's pass that ends between its users' vectors and their words (its budget
    spent: a restart or a kill does the same) leaves those turns out of the words index.
    The worker's next pass, holding the same users, indexes them, though none of their
    turns waits for a vector."""
    url = pg_server.new_database()
    cat_owners(url, 3)
    config = Config(db=url, embed=EmbedConfig(backend="hashing", batch_size=256),
                    pass_=PassConfig(max_seconds=0, max_items=1))
    store = open_store(config)
    embedder = HashingEmbedder()
    claims = Claims(store, config)
    claims.start()
    app = App(url)
    try:
        run_pass(store, config, embedder, ExtractiveCompleter(embedder), trigger="test",
                 force=False, claims=claims)
        assert app.value("SELECT COUNT(*) FROM dreamd_exchange_vectors") == 12
        assert app.value("SELECT COUNT(*) FROM dreamd_fts") == 0
        for _ in range(10):
            run_pass(store, config, embedder, ExtractiveCompleter(embedder), trigger="test",
                     force=False, claims=claims)
        assert app.value("SELECT COUNT(*) FROM dreamd_fts") == 12
    finally:
        claims.stop()
        store.close()
        app.close()


def test_a_connection_lost_inside_a_write_ends_the_pass_and_blames_no_item(
        pg_server: Any) -> None:
    """The server ends the pass's connection in the middle of its first gist's write (a
    failover, an administrator's pg_terminate_backend). That is no fault of the session
    being summarized: the pass ends, its row says the store cut it short, no failure is
    counted against the session (which would hold it back for jobs.backoff_seconds and
    quarantine it after a few), no lease is left held, and the next pass does the work."""
    url = pg_server.new_database()
    cat_owners(url, 3)
    app = App(url)
    app.execute("CREATE SEQUENCE cuts")
    app.execute("CREATE FUNCTION cut() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF nextval('cuts') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); "
                "END IF; RETURN NULL; END $$")
    app.execute("CREATE TRIGGER cut AFTER INSERT ON summaries FOR EACH ROW "
                "EXECUTE FUNCTION cut()")
    config = Config(db=url, embed=EmbedConfig(backend="hashing"))
    store = open_store(config)
    embedder = HashingEmbedder()
    claims = Claims(store, config)
    claims.start()
    try:
        with pytest.raises(psycopg.errors.AdminShutdown):
            run_pass(store, config, embedder, ExtractiveCompleter(embedder), trigger="test",
                     force=True, claims=claims)
        assert app.rows("SELECT outcome FROM dreamd_runs") == [("store_away",)]
        assert app.rows("SELECT job, item FROM dreamd_failures") == []
        assert held_by(url, claims.worker) == 0
        result = run_pass(store, config, embedder, ExtractiveCompleter(embedder),
                          trigger="test", force=True, claims=claims)
        assert result.outcome == "ok"
        assert app.value("SELECT COUNT(*) FROM summaries") == 3
    finally:
        claims.stop()
        store.close()
        app.close()


def summaries(url: str) -> int:
    app = App(url)
    try:
        return int(app.value("SELECT COUNT(*) FROM summaries"))
    except Exception:  # not migrated yet, or the server is still starting
        return -1
    finally:
        app.close()


def test_daemon_carries_on_after_the_server_restarts(pg_server: Any, tmp_path: Path) -> None:
    """A worker in --loop outlives a restart of its server: its passes and its heartbeat
    reconnect, it LISTENs again, turns the app adds afterwards are consolidated, and
    `status` says for how long the store was away."""
    url = pg_server.new_database()
    Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing"))).close()
    app = App(url)
    for n in range(3):
        app.session(f"s{n}", f"u{n}")
        app.turns(f"s{n}", [f"I adopted a cat called Mika{n}.", "How is she settling in?",
                            "She sleeps on the balcony all day.", "Cats love the sun."],
                  datetime(2024, 3, 1, 10, 0))
    app.close()
    log = tmp_path / "dreamd.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dreamd", "--db", url, "--loop", "1"], cwd=ROOT,
            env=dreamd_env(DREAMD_WORKERS__LEASE_SECONDS="3"), stdout=out,
            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: summaries(url) == 3, 60, step=0.2)
        pg_server.restart(down_for=4)  # passes come and find no server
        restarted = time.time()
        app = App(url)
        app.session("s9", "u9")
        app.turns("s9", ["I started learning the cello.", "How are the lessons?",
                         "My teacher says my bowing improved.", "Practice pays off."],
                  datetime(2024, 3, 2, 10, 0))
        app.close()
        assert wait_for(lambda: summaries(url) == 4, 60, step=0.2), "no pass after restart"

        def beating() -> bool:
            app = App(url)
            try:
                return bool(app.value("SELECT COUNT(*) FROM dreamd_workers WHERE "
                                      "heartbeat_at > to_timestamp(?)", (restarted,)))
            finally:
                app.close()

        assert wait_for(beating, 10, step=0.2), "the heartbeat did not resume"
        assert wait_for(lambda: '"listen_resumed"' in log.read_text(), 30, step=0.2)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    events = [json.loads(line) for line in log.read_text().splitlines()]
    named = [e["event"] for e in events]
    # While the server was down, each try said so in one line, no pass called it an error;
    # once it answered, the worker said for how long it was away, and passes went on.
    away = [e for e in events if e["event"] == "store_away"]
    assert away and all("PostgreSQL" in e["error"] for e in away), away
    assert "pass_error" not in named
    back = named.index("store_back")
    assert back > named.index("store_away") and "pass_finished" in named[back:]
    assert events[back]["away_seconds"] > 0
    # The heartbeat and LISTEN each said they were lost once, and that they came back.
    for lost, again in (("heartbeat_failed", "heartbeat_resumed"),
                        ("listen_failed", "listen_resumed")):
        assert named.count(lost) == 1 and named.index(lost) < named.index(again), named
    status = subprocess.run([sys.executable, "-m", "dreamd", "--db", url, "status"],
                            cwd=ROOT, env=dreamd_env(), capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert f"last away {events[back]['away_seconds']:.0f} s" in status.stdout, status.stdout


def test_daemon_stopped_while_the_server_is_down_exits_cleanly(pg_server: Any,
                                                                 tmp_path: Path) -> None:
    """SIGTERM while the server is away: the worker cannot hand its leases back (they
    expire), says so in one line, and exits 0."""
    url = pg_server.new_database()
    Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing"))).close()
    log = tmp_path / "dreamd.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dreamd", "--db", url, "--loop", "1"], cwd=ROOT,
            env=dreamd_env(), stdout=out, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: '"pass_finished"' in log.read_text(), 60, step=0.2)
        pg_server.down()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        pg_server.up()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events[-1]["event"] == "stopped"
    assert any(e["event"] == "leases_not_released" for e in events), events[-3:]

"""The store's behaviour on both engines, from one parametrized fixture (`target`): a pass
that consolidates every user once per change, recall scoped before ranking, forget,
export and context — on a SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from dreamd.config import Config, EmbedConfig, StoreConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.factory import make_backends
from dreamd.memory.api import Memory
from dreamd.store.postgres.store import PgStore
from dreamd.url import is_url
from tests.engines import App
from tests.helpers import dreamd_env

ROOT = Path(__file__).resolve().parent.parent

ANA = [("user", "I teach chemistry at the Lisbon lycée and I play tenor saxophone."),
       ("assistant", "Chemistry and saxophone, a fine mix. How long have you played?"),
       ("user", "Twelve years. My partner Rui gave me my first saxophone."),
       ("assistant", "What a gift from Rui.")]
BO = [("user", f"Saxophone saxophone saxophone, Bo's saxophone number {i}.")
      for i in range(30)]


def config_of(target: str) -> Config:
    return Config(db=target, embed=EmbedConfig(backend="hashing"))


def opened(target: str) -> tuple[Memory, App]:
    memory = Memory(target, config=config_of(target))
    return memory, App(target)


def dream(memory: Memory) -> object:
    memory.store.settle_turns(wait=5.0)
    _, completer = make_backends(memory.config)  # the offline default: extractive
    return run_pass(memory.store, memory.config, memory.embedder, completer,
                    trigger="test", force=True)


def two_users(memory: Memory, app: App) -> None:
    app.session("ana-1", "ana")
    app.say("ana-1", ANA)
    app.session("bo-1", "bo")
    app.say("bo-1", BO)


def test_a_pass_consolidates_every_user_once_per_change(target: str) -> None:
    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    # Every session's gist covers all its turns, filed under its owner.
    rows = app.rows("SELECT s.session_id, s.user_id, t.last_id, s.last_exchange_id "
                    "FROM summaries s JOIN dreamd_sessions t ON t.session_id = s.session_id "
                    "ORDER BY 1")
    assert [(r[0], r[1]) for r in rows] == [("ana-1", "ana"), ("bo-1", "bo")]
    assert all(r[2] == r[3] for r in rows)
    assert app.value("SELECT COUNT(*) FROM profile WHERE user_id = 'ana'") == 1
    facts = [r[0] for r in app.rows("SELECT statement FROM facts WHERE user_id = 'ana'")]
    assert any("chemistry" in f for f in facts), facts
    gists_before = app.rows("SELECT session_id, dreamd_seq FROM summaries ORDER BY 1")
    # Nothing changed: a second pass rewrites nothing.
    dream(memory)
    assert app.rows("SELECT session_id, dreamd_seq FROM summaries ORDER BY 1") == gists_before
    # One new turn: only its session's gist moves.
    app.say("ana-1", [("user", "Rui and I moved to Porto in May.")])
    dream(memory)
    after = dict(app.rows("SELECT session_id, dreamd_seq FROM summaries"))
    assert after["bo-1"] == dict(gists_before)["bo-1"]
    assert after["ana-1"] > dict(gists_before)["ana-1"]
    memory.close()
    app.close()


def test_recall_ranks_within_the_user_before_anyone_else_s_words(target: str) -> None:
    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    hits = memory.recall("who plays the saxophone?", users=["ana"], k=5)
    assert hits and {h.session_id for h in hits} == {"ana-1"}
    assert "saxophone" in hits[0].content.lower()
    # Bo's thirty louder turns never push Ana's out, even from the words side alone.
    words = memory.recall("saxophone", users=["ana"], k=2)
    assert {h.session_id for h in words} == {"ana-1"}
    memory.close()
    app.close()


def test_a_question_s_day_picks_what_was_said_that_day(target: str) -> None:
    """The day each turn was said comes from the store on either engine: the same words
    on two days, and the question's date ("on 3 June 2023", "yesterday") picks the day."""
    memory, app = opened(target)
    yesterday = (datetime.now(UTC) - timedelta(days=1)).replace(hour=12, minute=0)
    for session, at in (("june", "2023-06-03T12:00:00+00:00"),
                        ("july", "2023-07-07T12:00:00+00:00"),
                        ("recent", yesterday.isoformat())):
        app.session(session, "ana", at)
        app.say(session, [("user", "I cooked a mushroom risotto for my friends"),
                          ("assistant", "Lovely")], at)
    dream(memory)
    for question, session in (("What did I cook on 3 June 2023?", "june"),
                              ("What did I cook on July 7, 2023?", "july"),
                              ("What did I cook yesterday?", "recent")):
        assert memory.recall(question, users=["ana"], k=1)[0].session_id == session, question
    memory.close()
    app.close()


def test_context_and_export_carry_facts_with_their_sources(target: str) -> None:
    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    block = memory.context("ana-1", query="what does Ana teach?").text
    assert "chemistry" in block.lower()
    exported = memory.export("ana")
    assert exported["facts"] and all(f["from_turns"] for f in exported["facts"])
    assert all(f["made_by"].startswith("extractive:") for f in exported["facts"])
    assert "Saxophone number" not in json.dumps(exported)
    memory.close()
    app.close()


def test_forget_erases_a_user_and_leaves_the_other(target: str) -> None:
    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    ana_turns = [r[0] for r in app.rows("SELECT id FROM exchanges WHERE session_id = 'ana-1'")]
    memory.forget("ana", vacuum=True)
    assert app.value("SELECT COUNT(*) FROM exchanges WHERE session_id = 'ana-1'") == 0
    assert app.value("SELECT COUNT(*) FROM facts WHERE user_id = 'ana'") == 0
    assert app.value("SELECT COUNT(*) FROM summaries WHERE user_id = 'ana'") == 0
    marks = ",".join("?" * len(ana_turns))
    assert app.value(f"SELECT COUNT(*) FROM dreamd_exchange_vectors WHERE exchange_id IN "
                     f"({marks})", tuple(ana_turns)) == 0
    key = "id" if is_url(target) else "rowid"
    assert app.value(f"SELECT COUNT(*) FROM dreamd_fts WHERE {key} IN ({marks})",
                     tuple(ana_turns)) == 0
    assert app.value("SELECT COUNT(*) FROM exchanges WHERE session_id = 'bo-1'") == len(BO)
    assert app.value("SELECT COUNT(*) FROM summaries WHERE user_id = 'bo'") == 1
    assert memory.recall("saxophone", users=["ana"]) == []
    memory.close()
    app.close()


def test_an_app_that_made_its_tables_first_is_adopted(target: str) -> None:
    app = App(target)
    app.create_tables()
    app.execute("INSERT INTO sessions (id, name, created_at) VALUES ('s', 's', '2024-01-01')")
    app.say("s", ANA[:2])
    memory = Memory(target, config=config_of(target))
    dream(memory)
    assert app.value("SELECT user_id FROM sessions WHERE id = 's'") == "default"
    assert app.value("SELECT COUNT(*) FROM summaries") == 1
    memory.close()
    app.close()


def test_the_command_line_dreams_and_reports_on_either_engine(target: str) -> None:
    Memory(target, config=config_of(target)).close()
    app = App(target)
    app.session("ana-1", "ana")
    app.say("ana-1", ANA)
    env = dreamd_env(DREAMD_EMBED__BACKEND="hashing")
    run = subprocess.run([sys.executable, "-m", "dreamd", "--db", target, "--force"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert app.value("SELECT COUNT(*) FROM summaries") == 1
    status = subprocess.run([sys.executable, "-m", "dreamd", "--db", target, "status"],
                            capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert status.returncode == 0, status.stderr
    assert "pass 1  force" in status.stdout
    shown = target if not is_url(target) else "postgresql   1"
    assert shown in status.stdout
    # A turn the last pass has not counted: read-only listings say so, as one turn.
    app.say("ana-1", [("user", "One more thing: Rui plays the cello.")])
    users = subprocess.run([sys.executable, "-m", "dreamd", "--db", target, "users"],
                           capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert users.returncode == 0, users.stderr
    assert "ana: 1 sessions, 4 turns" in users.stdout
    assert "(and 1 newer turns the next pass will count)" in users.stdout
    app.close()


def test_a_schema_of_the_app_s_choosing(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = App(url)
    app.execute("CREATE SCHEMA chat")
    config = dataclasses.replace(config_of(url), store=StoreConfig(schema="chat"))
    memory = Memory(url, config=config)
    app.execute("SET search_path TO chat")
    app.session("ana-1", "ana")
    app.say("ana-1", ANA)
    dream(memory)
    assert app.value("SELECT COUNT(*) FROM chat.summaries") == 1
    assert app.value("SELECT to_regclass('public.exchanges')") is None
    memory.close()
    app.close()


def test_turns_committed_out_of_order_are_never_skipped(pg_server: object) -> None:
    """PostgreSQL hands out ids before commit: a turn with a smaller id may commit after a
    larger one. The pass must not move past it while it is in flight."""
    url = pg_server.new_database()  # type: ignore[attr-defined]
    memory, app = opened(url)
    app.session("s", "ana")
    slow = App(url)
    slow.execute("BEGIN")
    early = int(slow.value("INSERT INTO exchanges (session_id, role, content, created_at) "
                           "VALUES ('s', 'user', 'I moved to Porto.', '2024-03-01') "
                           "RETURNING id"))
    late = app.say("s", [("user", "Rui moved with me.")])[0]
    assert late > early
    dream(memory)  # the slow transaction is still open
    assert app.value("SELECT value FROM dreamd_state WHERE key = 'tally_id'") in (None, "0")
    assert app.value("SELECT COUNT(*) FROM summaries") == 0
    slow.execute("COMMIT")
    dream(memory)
    assert app.value("SELECT turns FROM dreamd_sessions WHERE session_id = 's'") == 2
    assert app.value("SELECT last_exchange_id FROM summaries WHERE session_id = 's'") == late
    memory.close()
    app.close()
    slow.close()


def _dreamd(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dreamd", "--db", url, *args],
                          capture_output=True, text=True, env=dreamd_env(), timeout=120,
                          cwd=ROOT)


def test_a_server_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://postgres@/memory?host={tmp_path}&connect_timeout=3"
    run = _dreamd(url, "--force")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect to PostgreSQL" in lines[0], run.stderr
    assert "Traceback" not in run.stderr


def test_wrong_credentials_are_one_line_without_the_password(pg_server: object) -> None:
    pg_server.admin("CREATE ROLE carol LOGIN PASSWORD 'right-one'")  # type: ignore[attr-defined]
    url = pg_server.url("postgres", "carol", "s3cret-wrong")  # type: ignore[attr-defined]
    run = _dreamd(url, "--force")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0], run.stderr
    assert "s3cret-wrong" not in run.stderr + run.stdout


def test_no_schema_and_no_right_to_create_it_writes_nothing(pg_server: object) -> None:
    url = pg_server.new_database()  # type: ignore[attr-defined]
    pg_server.admin("CREATE ROLE reader LOGIN")  # type: ignore[attr-defined]
    database = url.split("/")[3].split("?")[0]
    reader = pg_server.url(database, "reader")  # type: ignore[attr-defined]
    run = _dreamd(reader, "--force")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "permission denied" in lines[0], run.stderr
    app = App(url)
    assert app.value("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'") == 0
    app.close()
    # Read-only commands say dreamd has not run there, and write nothing either.
    status = _dreamd(reader, "status")
    assert status.returncode == 2 and "Traceback" not in status.stderr, status.stderr


def test_new_turns_wake_a_worker_through_notify(pg_server: Any) -> None:
    """On PostgreSQL the daemon looks for new turns itself only every 30 s: the app's
    INSERT, through the trigger's NOTIFY, brings the next pass within seconds."""
    import signal
    import time

    url = pg_server.new_database()
    memory, app = opened(url)
    two_users(memory, app)
    memory.close()
    proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dreamd_env(DREAMD_SCHEDULE__WAKE_ON_TURNS_SECONDS="1"),
                            cwd=ROOT)
    runs = "SELECT COUNT(*) FROM dreamd_runs WHERE ended_at IS NOT NULL"
    try:
        deadline = time.monotonic() + 60
        while app.value(runs) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert app.value(runs) == 1
        time.sleep(2)
        assert app.value("SELECT COUNT(*) FROM dreamd_runs") == 1  # nothing new: asleep
        status = subprocess.run([sys.executable, "-m", "dreamd", "--db", url, "status"],
                                capture_output=True, text=True, env=dreamd_env(), cwd=ROOT,
                                timeout=300)
        assert "1 worker: " in status.stdout and f"pid {proc.pid} (0 leases" in status.stdout
        app.say("ana-1", [("user", "We adopted a puppy called Nora today.")])
        # Asleep for 30 minutes otherwise: a pass within two means the turn woke it.
        noticed = time.monotonic()
        while app.value(runs) < 2 and time.monotonic() - noticed < 120:
            time.sleep(0.1)
        assert app.value(runs) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
        app.close()
    assert proc.returncode == 0 and "listen_failed" not in out


def test_a_session_the_app_moves_to_another_user_follows(target: str) -> None:
    """The app files a session under another user in place: the next pass moves it (the
    owner check looks only at the sessions rows the app added or moved)."""
    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    app.execute("UPDATE sessions SET user_id = 'cy' WHERE id = 'bo-1'")
    dream(memory)
    assert app.value("SELECT user_id FROM dreamd_sessions WHERE session_id = 'bo-1'") == "cy"
    assert app.value("SELECT user_id FROM summaries WHERE session_id = 'bo-1'") == "cy"
    assert app.value("SELECT COUNT(*) FROM profile WHERE user_id = 'bo'") == 0
    assert app.value("SELECT COUNT(*) FROM dreamd_owner_queue") == 0
    assert memory.recall("saxophone", users=["bo"]) == []
    assert {h.session_id for h in memory.recall("saxophone", users=["cy"])} == {"bo-1"}
    memory.close()
    app.close()


def test_demo_refuses_a_database_url_and_creates_nothing(tmp_path: Path) -> None:
    """`demo` writes a SQLite file as a chat app would: a URL is one line, exit 2, and no
    file or directory named after the URL appears."""
    url = "postgresql://postgres@/memory?host=/nowhere"
    run = subprocess.run([sys.executable, "-m", "dreamd", "--db", url, "demo"],
                         capture_output=True, text=True, env=dreamd_env(), timeout=60,
                         cwd=tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert list(tmp_path.iterdir()) == []


def test_sensing_counts_agree_for_everyone_and_for_one_user(target: str) -> None:
    """The backlog a pass senses, from the tally: the same figures on both engines (the
    counts share one statement on PostgreSQL), for every user and for a worker's users."""
    from datetime import UTC, datetime

    from dreamd.dream.sensing import read_backlog
    from dreamd.store.tally import sync_tally

    memory, app = opened(target)
    two_users(memory, app)
    dream(memory)
    app.say("ana-1", [("user", "Rui and I moved to Porto in May.")])
    app.session("cy-1", "cy")
    app.say("cy-1", [("user", "I am Cy."), ("assistant", "Hello Cy.")])
    memory.store.settle_turns(wait=5.0)
    sync_tally(memory.store)
    now = datetime(2024, 3, 2, tzinfo=UTC)
    model = memory.embedder.model
    everyone = read_backlog(memory.store, memory.config, now, model)
    assert (everyone.sessions, everyone.dirty, everyone.unsummarized_turns,
            everyone.turns_without_facts) == (3, 2, 3, 3)
    # ana-1 has a gist and one turn past it (not ripe); cy-1 none yet (ripe, and idle).
    assert (everyone.ripe, everyone.idle_ripe, everyone.idle_ripe_turns) == (1, 1, 2)
    ana = read_backlog(memory.store, memory.config, now, model, users=["ana"])
    assert (ana.sessions, ana.dirty, ana.unsummarized_turns, ana.turns_without_facts,
            ana.ripe) == (1, 1, 1, 1, 0)
    memory.close()
    app.close()


def test_workers_on_one_machine_share_its_cores(pg_server: Any) -> None:
    """Each worker's heartbeat counts the live workers on its machine, and the local
    model, left to choose its threads, takes its share of the cores."""
    from dreamd.backends.local import LocalEmbedder, cores
    from dreamd.dream.workers import Claims
    from dreamd.store.opening import open_store

    url = str(pg_server.new_database())
    config = Config(db=url)
    stores = [open_store(config) for _ in range(2)]
    assert all(isinstance(s, PgStore) for s in stores)
    first, second = (Claims(s, config) for s in stores)
    told: list[int] = []
    first.on_neighbours = told.append
    first.start()
    second.start()
    try:
        assert second.here == 2
        # The first worker hears of the second at its early second beat (about 1 s on).
        deadline = time.monotonic() + 60
        while first.here < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert told[0] == 1 and told[-1] == 2 and first.here == 2, told
        auto, fixed = LocalEmbedder(), LocalEmbedder(threads=3)
        before = auto.embed(["Sam adopted a dog called Biscuit."])
        for embedder in (auto, fixed):
            embedder.share(first.here)
        assert auto.threads == max(1, min(4, cores()) // 2) and fixed.threads == 3
        assert np.allclose(auto.embed(["Sam adopted a dog called Biscuit."]), before,
                           atol=1e-5)  # the same vectors with fewer threads
    finally:
        second.stop()
        first.stop()
        for store in stores:
            store.close()

"""Jobs side by side (dreamd.dream.lanes): with an LLM taking several calls at once, a
pass starts each job once the jobs it needs are done, under one limit on calls, and
leaves the same memory as one job after another."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dreamd.backends import write_gate
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.config import Config, EmbedConfig, UserConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.registry import JOBS, Registry
from dreamd.ids import user_key
from dreamd.models import JobSpec
from testkit.openai_server import FakeOpenAI
from tests.helpers import KEY, T0, add_turns, completer_config, make_chat_file, open_sqlite

WORKERS = 4


def both_ways(*pairs: tuple[str, str]) -> dict[str, str]:
    """Each task of each pair held until the other has asked (see FakeOpenAI's `hold`)."""
    return {a: b for pair in pairs for a, b in (pair, pair[::-1])}


def consolidated(tmp_path: Path, workers: int) -> tuple[dict[str, Any], FakeOpenAI]:
    """A first pass over eight sessions through the test server (0.2 s a call) with
    `workers` calls at once: what it stored, and the server (what it saw)."""
    # Side by side, the first of facts and summarize to ask (and of profile and reflect)
    # is answered once the other has asked too (one job after another, it never would):
    # the test sees them asked at once whatever the machine's speed.
    server = FakeOpenAI(delay=0.2, hold=both_ways(("facts", "summarize"), ("profile", "reflect"))
                        if workers > 1 else None).start()
    db = tmp_path / f"w{workers}.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"),
                    user=UserConfig(name="Sam"))
    config = dataclasses.replace(config, completer=completer_config(
        server, workers=workers, read_timeout_seconds=30, call_deadline_seconds=60))
    app = make_chat_file(db)
    for s in range(8):
        add_turns(app, f"s{s}", [f"I planted {s * 10 + n} tulip bulbs in row {n}."
                                 if n % 2 == 0 else f"How did row {n} turn out?"
                                 for n in range(6)],
                  start=T0 + timedelta(days=20 * s))
    app.close()
    store = open_sqlite(config)
    try:
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
            result = run_pass(store, config, HashingEmbedder(), client, trigger="test",
                              force=True)
    finally:
        store.close()
        server.stop()
    assert result.outcome == "ok", result.jobs
    assert all(r.done for r in result.jobs if r.job != "embed" or r.ran), result.jobs
    conn = sqlite3.connect(db)
    stored = {
        "gists": conn.execute("SELECT session_id, content FROM summaries ORDER BY 1").fetchall(),
        "facts": sorted(r[0] for r in conn.execute("SELECT statement FROM facts")),
        "profile": conn.execute("SELECT content FROM profile").fetchall(),
        "eras": conn.execute("SELECT month, content FROM eras ORDER BY 1").fetchall(),
        "narrative": conn.execute("SELECT content FROM narrative").fetchall(),
        "self": [{k: v for k, v in json.loads(data).items() if k in ("reflection", "topics")}
                 for (data,) in conn.execute("SELECT data FROM self_state")],
    }
    conn.close()
    return stored, server


def test_with_several_workers_jobs_that_need_nothing_of_each_other_ask_at_once(
        tmp_path: Path) -> None:
    """Facts' calls go out while summarize's do, and profile's, eras' and reflect's
    together; never more calls at once than `completer.workers` among them all. One job
    after another, the same memory comes out. (Each job waited for the one before it:
    facts and summarize, or profile and eras, were never with the model together.)"""
    side_by_side, server = consolidated(tmp_path, WORKERS)
    assert any({"facts", "summarize"} <= tasks for tasks in server.together), server.together
    assert any({"profile", "reflect"} <= tasks for tasks in server.together), server.together
    assert server.peak_all <= WORKERS
    assert server.peak["summarize"] >= 2
    one_at_a_time, one = consolidated(tmp_path, 1)
    assert one.peak_all == 1
    assert side_by_side == one_at_a_time
    assert len(side_by_side["gists"]) == 8 and side_by_side["facts"]
    assert side_by_side["profile"] and side_by_side["eras"] and side_by_side["narrative"]


def spec(name: str, needs: tuple[str, ...] | None) -> JobSpec:
    return JobSpec(name=name, drive="continuity", work=lambda s, f, c: (False, ""),
                   run=lambda ctx, reason: None, needs=needs)  # type: ignore[arg-type, return-value]


def test_what_a_job_needs_comes_before_it() -> None:
    assert JOBS.needs(next(j for j in JOBS if j.name == "summarize")) == ("embed",)
    assert JOBS.needs(next(j for j in JOBS if j.name == "facts")) == ()
    # A job that says nothing waits for every job before it; a need outside the registry
    # (a worker's registry of the agent's jobs alone) is no wait.
    mine = JOBS.with_job(spec("count", None), after="summarize")
    assert mine.needs(next(j for j in mine if j.name == "count")) == ("embed", "facts",
                                                                       "summarize")
    alone = Registry((next(j for j in JOBS if j.name == "reflect"),))
    assert alone.needs(alone.jobs[0]) == ()
    with pytest.raises(ValueError, match="needs 'later', which runs after it"):
        Registry((spec("first", ("later",)), spec("later", ())))


def test_two_writers_keep_the_gate_closed_until_both_are_done() -> None:
    """Jobs side by side share the write gate: a worker waits while any job writes."""
    gate = write_gate.Gate()
    first_in, second_in, first_out, second_out, ran = (threading.Event() for _ in range(5))

    def writer(inside: threading.Event, leave: threading.Event) -> None:
        with gate.closed():
            inside.set()
            leave.wait(10)

    one = threading.Thread(target=writer, args=(first_in, first_out))
    two = threading.Thread(target=writer, args=(second_in, second_out))
    one.start()
    two.start()
    assert first_in.wait(5) and second_in.wait(5)
    first_out.set()  # the first write ends; the second goes on
    one.join()
    worker = threading.Thread(target=gate.run, args=(lambda _: ran.set(), None))
    worker.start()
    assert not ran.wait(0.2)
    second_out.set()
    two.join()
    assert ran.wait(5)
    worker.join()


def test_a_share_of_the_pass_is_its_own_thread_s() -> None:
    budget = Budget(max_items=100)
    seen: dict[str, int] = {}
    opened, spent = threading.Barrier(2), threading.Barrier(2)

    def job(name: str, fraction: float, spend: int) -> None:
        with budget.share(fraction):
            opened.wait(5)  # both shares are open at once
            budget.spend(spend)
            spent.wait(5)
            seen[name] = budget.room()

    threads = [threading.Thread(target=job, args=("half", 0.5, 10)),
               threading.Thread(target=job, args=("all", 1.0, 10))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 20 spent of 100 by both; the half share (50 items from 0) has 30 left, the other
    # the whole pass's 80.
    assert seen == {"half": 30, "all": 80}
    assert budget.share_items is None


def test_a_second_connection_writes_after_the_first_and_counts_with_it(target: str) -> None:
    """Store.sibling: another connection to the same store, for a job beside the others;
    its write waits for the first's where they change one user's memory (on SQLite,
    whatever they change), and the pass's write-lock times hold both."""
    from tests.test_cycle import on_engine

    with on_engine(target) as (store, _app, _config):
        other = store.sibling()
        assert other is not None
        try:
            before = store.lock_times.writes
            key = user_key("sam")
            inside, trying, wrote = (threading.Event() for _ in range(3))

            def second() -> None:
                inside.wait(5)
                trying.set()
                with other.write(key) as conn:
                    conn.execute("INSERT INTO dreamd_state (key, value) VALUES ('b', '2')")
                wrote.set()

            thread = threading.Thread(target=second)
            thread.start()
            with store.write(key) as conn:
                conn.execute("INSERT INTO dreamd_state (key, value) VALUES ('a', '1')")
                inside.set()
                assert trying.wait(5)
                assert not wrote.wait(0.3)  # not while the first write holds its key
            assert wrote.wait(10)
            thread.join()
            assert store.lock_times is other.lock_times
            assert store.lock_times.writes == before + 2
            with other.read() as conn:
                rows = conn.execute("SELECT key FROM dreamd_state WHERE key IN ('a', 'b') "
                                    "ORDER BY key").fetchall()
            assert [r[0] for r in rows] == ["a", "b"]
        finally:
            other.close()


def test_jobs_side_by_side_run_on_threads_and_connections_of_their_own(db: Path) -> None:
    """Two jobs that need nothing of each other run at once (each waits for the other
    inside its run), on threads and connections of their own; each holds a share of the
    write gate while it computes, and its writes close the gate. One worker: one after
    another, on the pass's own thread and connection."""
    from dreamd.config import CompleterConfig
    from dreamd.models import JobResult
    from tests.helpers import RecordingCompleter, config_for

    make_chat_file(db).close()
    met = threading.Barrier(2, timeout=10)
    seen: list[dict[str, Any]] = []

    def job(name: str) -> JobSpec:
        def run(ctx: Any, reason: str) -> JobResult:
            if ctx.asking.calls_at_once > 1:
                met.wait()  # BrokenBarrierError, a failed job, if the other is not running
            with ctx.store.write() as conn:
                conn.execute("INSERT OR REPLACE INTO dreamd_state (key, value) VALUES (?, '1')",
                             (name,))
                busy = ctx.threads.gate.busy
            seen.append({"job": name, "thread": threading.get_ident(), "store": id(ctx.store),
                         "quiet": ctx.store.quiet == ctx.threads.gate.closed,
                         "busy in write": busy})
            return JobResult(name, True, reason, done=1)
        return JobSpec(name=name, drive="continuity", work=lambda s, f, c: (True, "always"),
                       run=run, needs=())

    jobs = Registry((job("left"), job("right")))
    for workers in (2, 1):
        seen.clear()
        config = dataclasses.replace(config_for(db), completer=CompleterConfig(
            backend="openai", workers=workers))
        store = open_sqlite(config)
        completer = RecordingCompleter(store, name="stand-in")
        result = run_pass(store, config, completer.embedder, completer, trigger="test",
                          force=True, jobs=jobs)
        assert [(r.job, r.done, r.failed) for r in result.jobs] == [
            ("left", 1, 0), ("right", 1, 0)], result.jobs
        assert store.quiet is contextlib.nullcontext  # after the round, writes as before
        store.close()
        threads = {s["thread"] for s in seen}
        stores = {s["store"] for s in seen}
        if workers > 1:
            assert len(threads) == 2 and threading.get_ident() not in threads
            assert len(stores) == 2
            assert all(s["quiet"] and s["busy in write"] == 0 for s in seen)
        else:
            assert threads == {threading.get_ident()} and len(stores) == 1
            assert not any(s["quiet"] for s in seen)


def test_a_closer_that_holds_a_share_gives_it_back_while_it_writes() -> None:
    """A job's own thread computes holding a share; its own write must not count it as a
    worker still computing (it would wait out the drain on itself)."""
    gate = write_gate.Gate()
    inside: list[int] = []

    def job(_: Any) -> None:
        assert gate.busy == 1
        with gate.closed():
            inside.append(gate.busy)
        inside.append(gate.busy)

    gate.run(job, None)
    assert inside == [0, 1] and gate.busy == 0


def test_a_job_that_needs_another_starts_once_that_one_has_done_what_it_reads(
        db: Path) -> None:
    """Side by side, a job starts once the jobs it needs have reached the point past which
    they do only what no other job reads (embed: its vectors are done, the words index is
    recall's), not only once they have ended."""
    from dreamd.config import CompleterConfig
    from dreamd.models import JobResult
    from tests.helpers import RecordingCompleter, config_for

    make_chat_file(db).close()
    started = threading.Event()

    def first(ctx: Any, reason: str) -> JobResult:
        ctx.reached()
        assert started.wait(10), "the job that needs this one waited for it to end"
        return JobResult("first", True, reason, done=1)

    def then(ctx: Any, reason: str) -> JobResult:
        started.set()
        return JobResult("then", True, reason, done=1)

    always = lambda s, f, c: (True, "always")  # noqa: E731
    jobs = Registry((JobSpec(name="first", drive="continuity", work=always, run=first),
                     JobSpec(name="then", drive="continuity", work=always, run=then,
                             needs=("first",))))
    config = dataclasses.replace(config_for(db), completer=CompleterConfig(
        backend="openai", workers=2))
    store = open_sqlite(config)
    completer = RecordingCompleter(store, name="stand-in")
    result = run_pass(store, config, completer.embedder, completer, trigger="test",
                      force=True, jobs=jobs)
    store.close()
    assert [(r.job, r.done, r.failed) for r in result.jobs] == [
        ("first", 1, 0), ("then", 1, 0)], result.jobs


def test_the_daemon_runs_jobs_side_by_side_on_either_engine(target: str) -> None:
    """`dreamd --force` with an LLM and four workers (on PostgreSQL a worker claiming its
    users under leases): every job does its work, facts' and summarize's calls are out
    together, and never more than four at once."""
    import subprocess
    import sys

    from tests.engines import App
    from tests.helpers import ROOT, dreamd_env

    app = App(target)
    app.create_tables()
    for s in range(6):
        app.turns(f"s{s}", [f"I planted {s * 10 + n} tulip bulbs in row {n}." if n % 2 == 0
                            else f"How did row {n} turn out?" for n in range(6)],
                  T0 + timedelta(days=20 * s))
    app.conn.close()
    server = FakeOpenAI(delay=0.2, hold=both_ways(("facts", "summarize"))).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dreamd", "--db", target, "--force"], cwd=ROOT,
            capture_output=True, text=True, timeout=180, env=dreamd_env(
                DREAMD_COMPLETER__BACKEND="openai", DREAMD_COMPLETER__BASE_URL=server.base_url,
                DREAMD_COMPLETER__MODEL="test-model", DREAMD_COMPLETER__WORKERS=str(WORKERS),
                DREAMD_COMPLETER__READ_TIMEOUT_SECONDS="30",
                DREAMD_COMPLETER__CALL_DEADLINE_SECONDS="60", OPENAI_API_KEY=KEY))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    finished = [json.loads(line) for line in done.stdout.splitlines()
                if line.startswith("{") and '"pass_finished"' in line]
    assert finished and finished[-1]["outcome"] == "ok", done.stdout[-2000:]
    assert set(finished[-1]["stored"]) >= {"embed", "facts", "summarize", "profile", "eras",
                                           "narrative", "reflect"}, finished[-1]
    assert any({"facts", "summarize"} <= tasks for tasks in server.together), server.together
    assert server.peak_all <= WORKERS


def test_a_job_that_raises_beside_others_stops_them_and_ends_the_pass(db: Path) -> None:
    """A store fault in one job's thread (here in its work test) is raised by the pass,
    and the job beside it sees its pass ending instead of running on."""
    from dreamd.config import CompleterConfig
    from dreamd.errors import StoreError
    from dreamd.models import JobResult
    from tests.helpers import RecordingCompleter, config_for

    make_chat_file(db).close()
    saw: list[bool] = []

    def slow(ctx: Any, reason: str) -> JobResult:
        deadline = time.monotonic() + 10
        while not ctx.state.ending and time.monotonic() < deadline:
            time.sleep(0.02)
        saw.append(ctx.state.ending)
        return JobResult("slow", True, reason)

    def broken(stats: Any, force: bool, config: Any) -> tuple[bool, str]:
        raise StoreError("the disk went away")

    jobs = Registry((JobSpec(name="slow", drive="continuity", work=lambda s, f, c: (True, ""),
                             run=slow, needs=()),
                     JobSpec(name="broken", drive="continuity", work=broken,
                             run=lambda ctx, reason: None, needs=())))  # type: ignore[arg-type, return-value]
    config = dataclasses.replace(config_for(db), completer=CompleterConfig(
        backend="openai", workers=2))
    store = open_sqlite(config)
    completer = RecordingCompleter(store, name="stand-in")
    with pytest.raises(StoreError, match="the disk went away"):
        run_pass(store, config, completer.embedder, completer, trigger="test", force=True,
                 jobs=jobs)
    store.close()
    assert saw == [True]


def test_a_call_queued_behind_the_others_is_not_made_once_a_stop_came() -> None:
    """Side by side, calls wait for one of `completer.workers` slots; one that gets its
    slot after a stop request makes no call."""
    from dreamd.errors import Stopping
    from tests.helpers import RecordingCompleter

    stop = threading.Event()
    ctx = JobContext.for_pass(None, Config(), HashingEmbedder(), RecordingCompleter(None),  # type: ignore[arg-type]
                              Budget(stop=stop.is_set))
    ctx.threads.calls = threading.BoundedSemaphore(1)
    ctx.threads.calls.acquire()  # the one slot is taken
    outcome: list[str] = []

    def queued() -> None:
        try:
            with ctx.call_slot():
                outcome.append("called")
        except Stopping:
            outcome.append("not made")

    waiter = threading.Thread(target=queued)
    waiter.start()
    stop.set()
    ctx.threads.calls.release()
    waiter.join(5)
    assert outcome == ["not made"]


def test_a_write_inside_a_write_and_a_wait_inside_it_do_not_wait_on_themselves() -> None:
    """A job's thread writes (the gate closed) and, inside, a nested write or a wait
    (the local model's run) neither waits out the drain again nor takes a share back
    while it is itself the one keeping the gate closed."""
    gate = write_gate.Gate(drain_seconds=10)
    done = threading.Event()

    def job(_: Any) -> None:
        with gate.closed():
            with gate.closed():
                pass
            with write_gate.waiting():
                pass
            assert gate.busy == 0
        done.set()

    thread = threading.Thread(target=gate.run, args=(job, None))
    thread.start()
    assert done.wait(5)
    thread.join()

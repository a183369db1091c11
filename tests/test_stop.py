"""Stopping while the LLM hangs: a real daemon process, a real server that never answers."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.openai_server import FakeOpenAI
from tests.helpers import ROOT, big_file, dreamd_env, wait_for

GRACE = 4.0


@pytest.fixture
def hanging() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    fake.plan(*["hang:40"] * 200)
    yield fake
    fake.stop()


def llm_config(tmp_path: Path, server: FakeOpenAI, grace: float | None = GRACE) -> Path:
    path = tmp_path / "dreamd.toml"
    stop = f"[pass]\nstop_grace_seconds = {grace}\n" if grace is not None else ""
    path.write_text(f"""
[completer]
backend = "openai"
base_url = "{server.base_url}"
model = "test-model"
workers = 4
read_timeout_seconds = 120
item_deadline_seconds = 300

[facts]
producer = "offline"  # the scripted calls are the summaries'

{stop}""")
    return path


def chat_calls(server: FakeOpenAI) -> int:
    with server.lock:
        return sum(r["path"].endswith("/chat/completions") for r in server.requests)


@pytest.mark.parametrize("mode", [["--force"], ["--loop", "600"]], ids=["force", "daemon"])
def test_sigterm_with_every_call_hung_exits_0_within_the_grace(
        tmp_path: Path, hanging: FakeOpenAI, mode: list[str]) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 30, 6)
    proc = four_calls_hung(db, llm_config(tmp_path, hanging), mode, hanging)
    time.sleep(0.3)
    calls = chat_calls(hanging)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    took = time.monotonic() - signalled
    assert proc.returncode == 0, err[-2000:]
    assert took <= GRACE + 5, took  # the grace, and a busy machine's exit
    assert chat_calls(hanging) == calls  # no new call and no retry after the signal
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM summaries").fetchone() == (0,)
    conn.close()
    interrupted_abandoning_four(db, out)


def four_calls_hung(db: Path, config: Path, args: list[str], hanging: FakeOpenAI
                    ) -> subprocess.Popen[str]:
    """dreamd started on `db`, once four calls (one per worker) hang at the server."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dreamd", "--db", str(db), "--config", str(config), *args],
        cwd=ROOT, env=dreamd_env(OPENAI_API_KEY="sk-test"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    wait_for(lambda: chat_calls(hanging) >= 4, 120)
    assert chat_calls(hanging) == 4  # four workers, each inside a call that never ends
    return proc


def interrupted_abandoning_four(db: Path, out: str) -> None:
    conn = sqlite3.connect(db)
    outcome, notes = conn.execute(
        "SELECT outcome, notes FROM dreamd_runs ORDER BY id DESC LIMIT 1").fetchone()
    conn.close()
    assert outcome == "interrupted"
    assert "4 backend calls still in flight were abandoned" in notes
    assert '"event": "calls_abandoned"' in out


def test_sigterm_with_the_facts_batches_hung_exits_0_within_the_grace(
        tmp_path: Path, hanging: FakeOpenAI) -> None:
    """The facts job's batches go to the model four at once: a stop abandons them all
    within the grace, and no batch's facts or read marks are written."""
    db = tmp_path / "memory.db"
    big_file(db, 30, 40)  # 1,200 turns: six batches
    config = llm_config(tmp_path, hanging)
    config.write_text(config.read_text().replace('producer = "offline"', 'producer = "llm"'))
    proc = four_calls_hung(db, config, ["--force"], hanging)
    assert set(hanging.tasks()) == {"facts"}
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert time.monotonic() - signalled <= GRACE + 5
    assert chat_calls(hanging) == 4  # no retry after the signal
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM facts").fetchone() == (0,)
    assert conn.execute("SELECT SUM(facts_turns) FROM dreamd_sessions").fetchone() == (0,)
    conn.close()
    interrupted_abandoning_four(db, out)


def test_a_slow_answer_inside_its_deadline_keeps_the_watchdog_fed(tmp_path: Path) -> None:
    """Every answer takes 9 s, the watchdog interval is 6 s: the pass is healthy, so the
    pings never stop (a stuck pass going silent is tested in test_daemon). The pings come
    every 1.5 s; a pass that went silent inside an answer would leave a 9 s gap, so the
    6 s bound leaves a busy machine room to be late with a ping or two."""
    import itertools

    from tests.helpers import messages_until, notify_socket

    slow = FakeOpenAI(delay=9.0).start()
    db = tmp_path / "memory.db"
    big_file(db, 4, 6)
    sock = notify_socket(tmp_path)
    env = dreamd_env(OPENAI_API_KEY="sk-test", NOTIFY_SOCKET=str(tmp_path / "notify.sock"),
                     WATCHDOG_USEC="6000000", DREAMD_COMPLETER__WORKERS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dreamd", "--db", str(db), "--config",
         str(llm_config(tmp_path, slow, grace=None)), "--loop", "600"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ready = messages_until(sock, lambda seen: any("READY=1" in m for _, m in seen))
        # From READY until the pass has waited through a whole slow answer and is inside
        # the next: however long a busy machine takes, the pings never stop.
        seen = messages_until(sock, lambda _: chat_calls(slow) >= 2, timeout=600)
        end = time.monotonic()
        pings = [t for t, m in seen if m == "WATCHDOG=1"]
        marks = [ready[-1][0], *pings, end]
        # never a gap systemd (6 s here) would act on, where the old pass went silent
        # for the whole of each answer
        assert max(b - a for a, b in itertools.pairwise(marks)) < 6.0, (marks, pings)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
        sock.close()
        slow.stop()


def test_sigterm_during_a_hung_embedding_call_on_the_pass_thread(
        tmp_path: Path, hanging: FakeOpenAI) -> None:
    """Embeddings are called on the pass thread itself, so the pool cannot abandon them:
    the grace timer ends the process (exit 0) and marks the pass interrupted."""
    db = tmp_path / "memory.db"
    big_file(db, 3, 4)
    config = llm_config(tmp_path, hanging)
    config.write_text(config.read_text() + '\n[embed]\nbackend = "openai"\n')
    env = dreamd_env(OPENAI_API_KEY="sk-test")
    del env["DREAMD_EMBED__BACKEND"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dreamd", "--db", str(db), "--config", str(config), "--force"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not hanging.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hanging.requests and hanging.requests[0]["path"].endswith("/embeddings")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert time.monotonic() - signalled <= GRACE + 5
    # No retry after the signal: no request asked twice. Beside embed, the facts job
    # (offline here) embeds its statements on the same server, and its request may be out
    # before the signal. One look at what the server holds (it may still be recording a
    # request the process sent as it went).
    seen = list(hanging.requests)
    asked = [json.dumps([r["path"], r["body"]], sort_keys=True) for r in seen]
    assert all(r["path"].endswith("/embeddings") for r in seen), asked
    assert len(asked) == len(set(asked)) <= 2, asked
    assert '"event": "stop_grace_over"' in out
    conn = sqlite3.connect(db)
    outcome, error = conn.execute(
        "SELECT outcome, error FROM dreamd_runs ORDER BY id DESC LIMIT 1").fetchone()
    conn.close()
    assert outcome == "interrupted" and "still in flight" in error


def test_an_embedding_call_counts_as_progress_until_its_deadline() -> None:
    """The watchdog's view while the pass thread waits in an embedding call: healthy until
    the call's own deadline, though no beat comes meanwhile."""
    import threading

    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.runtime.daemon import Health, WatchedEmbedder

    class Slow(HashingEmbedder):
        def embed(self, texts: list[str]) -> Any:
            inside.set()
            release.wait(10)
            return super().embed(texts)

    inside, release = threading.Event(), threading.Event()
    health = Health(running=True)
    watched = WatchedEmbedder(Slow(), health, deadline=60)
    worker = threading.Thread(target=watched.embed, args=(["hello"],))
    worker.start()
    assert inside.wait(10)
    time.sleep(0.3)
    assert health.healthy(limit=0.1)  # no beat for 0.3 s, but inside a bounded call
    release.set()
    worker.join(10)
    health.last_beat -= 1.0
    assert not health.healthy(limit=0.1)  # the call is over: beats are due again

"""Real processes on real files: a live chat writer during a pass, and kill -9 at random."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.consolidated import problems
from tests.helpers import (
    ROOT,
    add_turns,
    big_file,
    chat_texts,
    dreamd_env,
    query,
    wait_for,
)


def runs(db: Path) -> int:
    """Passes begun (0 before the first dreamd has made its tables)."""
    return query(db, "SELECT COUNT(*) FROM dreamd_runs", 0) or 0


def turns(db: Path) -> int:
    return query(db, "SELECT COUNT(*) FROM exchanges", 0) or 0


@pytest.mark.soak
def test_live_writer_during_a_force_pass(tmp_path: Path) -> None:
    """≥ 50 inserts/s by another process through a whole pass on 20k turns: no lock errors,
    every row kept, and the new turns are consolidated by the next pass."""
    db = tmp_path / "memory.db"
    big_file(db, 400, 50)  # 20,000 turns
    stop, report = tmp_path / "stop", tmp_path / "report.json"
    writer = subprocess.Popen(
        [sys.executable, "-m", "bench.chat_writer", str(db), "80", str(stop), str(report)],
        cwd=ROOT, env=dreamd_env(),
    )
    assert wait_for(lambda: turns(db) > 20000, 60)  # the writer is writing
    run = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                         cwd=ROOT, env=dreamd_env(), capture_output=True, text=True, timeout=600)
    stop.touch()
    writer.wait(timeout=30)
    data = json.loads(report.read_text())
    assert run.returncode == 0, run.stderr[-2000:]
    output = run.stdout + run.stderr
    assert "locked" not in output and "busy" not in output.lower()
    assert data["errors"] == []
    assert data["ids"]  # it wrote throughout, and none of its writes timed out (above)
    conn = sqlite3.connect(db)
    present = {r[0] for r in conn.execute("SELECT id FROM exchanges WHERE id > 20000")}
    assert set(data["ids"]) <= present
    conn.close()
    # The next pass picks every live turn up.
    again = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                           cwd=ROOT, env=dreamd_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    conn = sqlite3.connect(db)
    behind = conn.execute(
        "SELECT COUNT(*) FROM (SELECT e.session_id, MAX(e.id) m FROM exchanges e "
        "GROUP BY e.session_id) x LEFT JOIN summaries s ON s.session_id = x.session_id "
        "WHERE s.last_exchange_id IS NOT x.m").fetchone()[0]
    assert behind == 0
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


@pytest.mark.soak
def test_kill_9_at_random_moments_then_one_clean_pass(tmp_path: Path) -> None:
    """kill -9 at random moments while a chat app writes 60 turns a second throughout:
    nothing lost, duplicated or torn."""
    db = tmp_path / "memory.db"
    big_file(db, 300, 40)
    stop, report = tmp_path / "stop", tmp_path / "writer.json"
    writer = subprocess.Popen(
        [sys.executable, "-m", "bench.chat_writer", str(db), "60", str(stop), str(report)],
        cwd=ROOT, env=dreamd_env())
    rng = random.Random(20261122)
    kills = 0
    for round_ in range(60):
        if kills >= 22:
            break
        # The chat app keeps writing between crashes, so every pass has work to be cut.
        conn = sqlite3.connect(db, isolation_level=None, timeout=10)
        for s in rng.sample(range(300), 150):
            add_turns(conn, f"s{s:05d}", chat_texts(round_, 2))
        add_turns(conn, f"new{round_}", chat_texts(round_, 5))
        conn.close()
        proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                                cwd=ROOT, env=dreamd_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        # A random moment of its pass, counted from the pass's start: a busy machine can
        # take longer than that to start a process, and a kill before the pass is no test.
        began = runs(db)
        wait_for(lambda: runs(db) > began or proc.poll() is not None, 120)  # noqa: B023
        time.sleep(rng.uniform(0.0, 0.6))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
    stop.touch()
    writer.wait(timeout=30)
    written = json.loads(report.read_text())
    assert kills >= 20
    assert len(written["ids"]) > 600 and written["errors"] == []
    final = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                           cwd=ROOT, env=dreamd_env(), capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    # Intact; every turn the app wrote there once; every session summarized exactly up to
    # its last turn, no turn folded into the tally twice or lost, one vector each.
    assert problems(db, written["ids"]) == []
    conn = sqlite3.connect(db)
    # every killed pass is marked as ended by a crash once the next dreamd starts
    outcomes = dict(conn.execute("SELECT outcome, COUNT(*) FROM dreamd_runs GROUP BY outcome"))
    assert "running" not in outcomes and outcomes.get("crashed", 0) >= 1, outcomes
    months = {r[0] for r in conn.execute("SELECT dreamd_month FROM summaries")}
    assert {r[0] for r in conn.execute("SELECT month FROM eras")} == months
    conn.close()


def test_loop_runs_passes_until_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 5, 6)
    proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), "--loop", "0.2"],
                            cwd=ROOT, env=dreamd_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    passes = 0
    while time.monotonic() < deadline and passes < 3:
        time.sleep(0.2)
        conn = sqlite3.connect(db)
        try:
            passes = conn.execute("SELECT COUNT(*) FROM dreamd_runs WHERE ended_at IS NOT NULL"
                                  ).fetchone()[0]
        except sqlite3.OperationalError:
            passes = 0  # not migrated yet
        conn.close()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert passes >= 3 and proc.returncode == 0, err[-2000:]
    assert '"event": "stopped"' in out
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM dreamd_runs WHERE outcome = 'running'"
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 5

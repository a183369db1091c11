"""A newcomer's typos are caught: unknown users, a mistyped path, what a file holds."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from dreamd.cli.commands import main
from tests.helpers import add_turns, chat_texts, dreamd_env, make_chat_file, open_sqlite


def run(db: Path, *args: str):
    return CliRunner().invoke(main, ["--db", str(db), *args], env=dreamd_env())


def two_users(db: Path) -> None:
    conn = make_chat_file(db)
    conn.execute("INSERT INTO sessions (id, name, created_at) VALUES "
                 "('b1', 'bob', '2026-03-01'), ('c1', 'cleo', '2026-03-01')")
    conn.close()
    assert run(db, "--force").exit_code == 0  # migrates: sessions gain user_id
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE sessions SET user_id = name")
    add_turns(conn, "b1", chat_texts(0, 6))
    add_turns(conn, "c1", chat_texts(1, 4))
    conn.close()
    assert run(db, "--force").exit_code == 0


def digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def test_privacy_requests_for_unknown_users_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    two_users(db)
    before = digest(db)
    for args in (["forget", "--user", "Bob"], ["forget", "--user", "Bob", "--dry-run"],
                 ["export", "--user", "nobody"], ["show", "--user", "Bob"],
                 ["recall", "dog", "--user", "Bob"]):
        result = run(db, *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.strip().splitlines() == [
            f"Error: no user {args[args.index('--user') + 1]!r} in this memory file; known "
            "users: bob, cleo (dreamd users lists them)"], result.output
    wrong_session = run(db, "forget", "--user", "bob", "--session", "c1")
    assert wrong_session.exit_code == 2
    assert "user 'bob' has no session 'c1'" in wrong_session.output
    assert digest(db) == before


def test_recall_without_user_in_a_multi_user_file_says_whom_to_ask_for(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    two_users(db)
    result = run(db, "recall", "guitar")
    assert result.exit_code == 2
    assert "no user 'default' in this memory file; known users: bob, cleo" in result.output
    assert run(db, "recall", "guitar", "--user", "cleo").exit_code == 0


def test_users_and_sessions_list_what_the_file_holds(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    two_users(db)
    conn = sqlite3.connect(db, isolation_level=None)
    add_turns(conn, "b1", chat_texts(0, 3))  # not counted by a pass yet
    conn.close()
    users = run(db, "users")
    assert users.exit_code == 0, users.output
    assert users.output.splitlines() == [
        "bob: 1 sessions, 6 turns, 0 not yet in a gist",
        "cleo: 1 sessions, 4 turns, 0 not yet in a gist",
        "(and 3 newer turns the next pass will count)"]
    sessions = run(db, "sessions", "--user", "cleo")
    assert sessions.exit_code == 0, sessions.output
    assert sessions.output.splitlines()[0].startswith("c1  cleo  4 turns, 0 not yet in a gist")
    assert run(db, "sessions", "--user", "nobody").exit_code == 2


def test_a_mistyped_path_is_not_dreamed_on_without_create(tmp_path: Path) -> None:
    typo = tmp_path / "memroy.db"
    for args in (["--force"], ["--loop", "1"]):
        result = run(typo, *args)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"Error: {typo} does not exist: point --db at the chat app's memory file, or "
            "pass --create to start a new one"]
        assert not typo.exists()
    assert run(typo, "--force", "--create").exit_code == 0
    assert typo.exists()


def test_status_tells_the_truth_between_passes(tmp_path: Path) -> None:
    """40 turns arrive after a pass: status (read-only) counts them, shows the drives the
    next pass would start from, the backends, and whether a daemon holds the file."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import ROOT

    db = tmp_path / "memory.db"
    conn = make_chat_file(db)
    add_turns(conn, "old", chat_texts(0, 6))
    conn.close()
    assert run(db, "--force").exit_code == 0
    conn = sqlite3.connect(db, isolation_level=None)
    add_turns(conn, "new", chat_texts(1, 40))
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    result = run(db, "status", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert data["backlog"]["sessions"] == 2 and data["backlog"]["dirty"] == 1
    assert data["backlog"]["unsummarized_turns"] == 40
    assert data["backlog"]["unembedded_turns"] == 40
    assert data["drives"]["stability"] < 0.9 and data["drives"]["continuity"] > 0.3
    assert data["backends"]["completer"] == "extractive (offline, no LLM)"
    assert data["llm"].startswith("none")
    assert data["daemon"]["pid"] is None
    text = run(db, "status").output
    assert "no dreamd is running on this file" in text and "40 turns unembedded" in text

    daemon = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db)], cwd=ROOT,
                              env=dreamd_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180  # once its first pass ends (a busy box: slowly)
        while time.monotonic() < deadline:
            held = json.loads(run(db, "status", "--json").output)["daemon"]
            if held["pid"] and held["next_pass_at"]:
                break
            time.sleep(0.2)
        assert held["pid"] == daemon.pid and held["next_pass_at"], held
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)


def test_quiet_by_default_and_progress_at_a_steady_pace(tmp_path: Path) -> None:
    """Read commands print no SQLite warning (status names the library instead); long
    jobs in the daemon log progress at most every 30 s; on a terminal the progress line
    is wiped before a log line is printed."""
    import io

    import structlog

    from dreamd.cli.boundary import Progress
    from dreamd.runtime import log as logging_

    db = tmp_path / "memory.db"
    two_users(db)
    for args in (["status"], ["show", "--user", "bob"], ["recall", "x", "--user", "bob"]):
        assert "sqlite_wal_reset_bug" not in run(db, *args).output
    assert "sqlite       3." in run(db, "status").output

    now = [0.0]
    logging_.configure("info")  # the commands above left it at warning
    with structlog.testing.capture_logs() as logs:
        progress = logging_.LoggedProgress(logging_.get_logger(), clock=lambda: now[0])
        for second in range(0, 95, 5):
            now[0] = float(second)
            progress("embed", second * 10, 1000)
    assert [(e["event"], e["done"]) for e in logs] == [("job_progress", 300),
                                                       ("job_progress", 600),
                                                       ("job_progress", 900)]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = Progress(screen)
    unregister = logging_.before_each_line(bar.clear)
    try:
        logging_.configure("info", "json", stream=screen)
        bar("summarize", 3, 10)
        logging_.get_logger().info("job_finished", job="embed")
    finally:
        unregister()
        logging_.configure("warning")
    drawn, _, line = screen.getvalue().partition("\r" + " " * len("\rsummarize: 3/10   "))
    assert drawn == "\rsummarize: 3/10   " and line.startswith('\r{"job": "embed"'), repr(
        screen.getvalue())


def test_retry_releases_quarantined_items_and_status_says_how(tmp_path: Path) -> None:
    from dreamd.store.runs import record_failure
    from tests.helpers import config_for

    db = tmp_path / "memory.db"
    two_users(db)
    store = open_sqlite(config_for(db))
    with store.write() as conn:
        for item in ("b1", "c1"):
            record_failure(conn, "summarize", item, "InputRejected: the server rejected it",
                             "2026-03-01T00:00:00+00:00", "2026-03-01T01:00:00+00:00", True)
    store.close()
    shown = run(db, "status").output
    assert "quarantined:" in shown and "`dreamd retry [JOB [ITEM]]` releases them" in shown
    unknown = run(db, "retry", "sumarize")
    assert unknown.exit_code == 2 and "no job 'sumarize'; the jobs are embed" in unknown.output
    one = run(db, "retry", "summarize", "b1")
    assert one.exit_code == 0, one.output
    assert one.output.strip() == ("released 1 item of job 'summarize' item 'b1'; the next "
                                  "pass tries again")
    assert run(db, "retry", "summarize", "b1").exit_code == 2  # nothing left of it
    rest = run(db, "retry")
    assert rest.exit_code == 0 and "released 1 item of every job" in rest.output
    assert "quarantined:" not in run(db, "status").output

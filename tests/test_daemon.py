"""The daemon as people run it: a real subprocess, real signals, a real notify socket."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import (
    ROOT,
    big_file,
    dreamd_env,
    messages_until,
    notify_socket,
    query,
    silent_for,
    start,
    wait_for,
)


def consistent(db: Path) -> None:
    """integrity ok; every gist ends on a real turn of its session; the tally adds up."""
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    torn = conn.execute(
        "SELECT COUNT(*) FROM summaries s WHERE content = '' OR NOT EXISTS (SELECT 1 FROM "
        "exchanges e WHERE e.id = s.last_exchange_id AND e.session_id = s.session_id)"
    ).fetchone()[0]
    assert torn == 0
    tally = dict(conn.execute("SELECT session_id, turns FROM dreamd_sessions"))
    counts = dict(conn.execute(
        "SELECT session_id, COUNT(*) FROM exchanges WHERE id <= "
        "(SELECT CAST(value AS INTEGER) FROM dreamd_state WHERE key = 'tally_id') "
        "GROUP BY session_id"))
    assert tally == counts
    conn.close()


def test_first_pass_soon_and_sigterm_mid_pass_exits_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 100, 40)  # long sessions: each gist takes a while
    proc = start(db, "--loop", "1")
    assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs", 0), 60)
    assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM summaries", 0), 120)
    proc.send_signal(signal.SIGTERM)  # mid-pass: summaries are being written
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err[-2000:]
    assert all(json.loads(line) for line in out.splitlines())
    assert '"event": "stopping"' in out and '"event": "stopped"' in out
    consistent(db)
    assert query(db, "SELECT outcome FROM dreamd_runs ORDER BY id LIMIT 1") == "interrupted"
    assert query(db, "SELECT COUNT(*) FROM summaries") < 100  # it really was mid-pass


def test_second_sigterm_exits_at_once(tmp_path: Path) -> None:
    """A pass stuck behind the chat app's write lock ignores nothing: the first SIGTERM
    waits for the current item, the second ends the process at once."""
    db = tmp_path / "memory.db"
    big_file(db, 120, 10)  # a first pass of several seconds
    proc = start(db, "--loop", "1", env=dreamd_env(DREAMD_STORE__BUSY_TIMEOUT_MS="60000"))
    assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs", 0), 60)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the pass's next write now waits up to 60 s
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None  # still finishing its item, as it should
    before = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert time.monotonic() - before < 10  # not the 60 s the write would wait
    assert proc.returncode == 128 + signal.SIGTERM
    holder.execute("ROLLBACK")
    holder.close()
    consistent(db)


def test_second_instance_is_refused_until_the_first_is_killed(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 3, 4)
    first = start(db, "--loop", "30")
    assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs", 0), 60)
    second = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                            cwd=ROOT, env=dreamd_env(), capture_output=True, text=True,
                            timeout=30)
    assert second.returncode == 3
    assert second.stderr.strip().splitlines() == [
        f"Error: another dreamd (pid {first.pid}) is already working on {db}"]
    # The same file by another name: a symlink, and a hard link (whose -wal would be
    # another file: two writers on one database, which corrupts it).
    (tmp_path / "alias.db").symlink_to(db)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "hard.db").hardlink_to(db)
    for alias in (tmp_path / "alias.db", tmp_path / "other" / "hard.db"):
        refused = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(alias), "--force"],
                                 cwd=ROOT, env=dreamd_env(), capture_output=True, text=True,
                                 timeout=30)
        assert refused.returncode == 3, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines() == [
            f"Error: another dreamd (pid {first.pid}) is already working on {alias}"]
    assert not (tmp_path / "other" / "hard.db-wal").exists()
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    third = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                           cwd=ROOT, env=dreamd_env(), capture_output=True, text=True,
                           timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]


def test_sighup_reloads_a_valid_config_and_keeps_the_old_on_error(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 3, 4)
    config = tmp_path / "dreamd.toml"
    config.write_text("[schedule]\nmin_interval_seconds = 60\nmax_interval_seconds = 60\n")
    proc = start(db, "--config", str(config))
    runs = lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs", 0)  # noqa: E731
    assert wait_for(lambda: runs() == 1, 60)
    time.sleep(1.0)
    assert runs() == 1  # the next pass is a minute away
    config.write_text("[schedule]\nmin_interval_seconds = 0.2\nmax_interval_seconds = 0.2\n")
    proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: runs() >= 4, 60)  # the new interval took effect
    config.write_text("[schedule]\nmin_interval_seconds = 60\nmax_interval_sekonds = 60\n")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    count = runs()
    assert wait_for(lambda: runs() >= count + 3, 60)  # still the 0.2 s interval
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    events = [json.loads(line) for line in out.splitlines()]
    reloaded = [e for e in events if e["event"] == "config_reloaded"]
    failed = [e for e in events if e["event"] == "config_reload_failed"]
    assert len(reloaded) == 1 and reloaded[0]["changed"] == ["schedule"]
    assert len(failed) == 1 and "max_interval_sekonds is not a known" in failed[0]["error"]
    assert proc.returncode == 0


def test_notify_ready_status_watchdog_and_a_stuck_pass(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    big_file(db, 3, 4)
    sock = notify_socket(tmp_path)
    env = dreamd_env(NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="1000000",
                     DREAMD_STORE__BUSY_TIMEOUT_MS="60000")
    proc = start(db, "--loop", "0.3", env=env)
    try:
        # Counted from the first pass on, however long this machine takes to start us.
        started = messages_until(
            sock, lambda seen: any(m.startswith("STATUS=last pass ok") for _, m in seen))
        assert any("READY=1" in m for _, m in started)
        healthy = messages_until(
            sock, lambda seen: sum(m == "WATCHDOG=1" for _, m in seen) >= 6)
        pings = [t for t, m in healthy if m == "WATCHDOG=1"]
        # Every quarter interval; never a gap systemd (1 s here) would act on.
        assert max(b - a for a, b in itertools.pairwise(pings)) < 1.0, pings
        # The chat app holds the write lock: the next pass blocks inside a write.
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        # The next pass (≤ 0.3 s away) blocks; half an interval later the pings stop, and
        # they stay stopped, twice as long as systemd waits before it kills and restarts us.
        messages_until(sock, silent_for(2.0))
        holder.execute("ROLLBACK")
        holder.close()
        messages_until(sock, lambda seen: any(m == "WATCHDOG=1" for _, m in seen))
        proc.send_signal(signal.SIGTERM)
        messages_until(sock, lambda seen: any(m == "STOPPING=1" for _, m in seen))
    finally:
        proc.kill()
        proc.communicate(timeout=30)
        sock.close()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed on this machine")
@pytest.mark.parametrize(("shipped", "instance"), [("dreamd.service", "dreamd.service"),
                                                   ("dreamd@.service", "dreamd@1.service"),
                                                   ("dreamd-serve.service",
                                                    "dreamd-serve.service")])
def test_unit_file_verifies_silently_and_is_hardened(tmp_path: Path, shipped: str,
                                                     instance: str) -> None:
    """The shipped units (one dreamd on a file; a worker instance on PostgreSQL), with
    ExecStart pointed at this checkout's dreamd (verify checks that the binary exists),
    verify with no output and have an exposure of at most 2.0."""
    unit = (ROOT / "systemd" / shipped).read_text()
    dreamd_bin = shutil.which("dreamd") or str(Path(sys.executable).parent / "dreamd")
    local = tmp_path / instance
    local.write_text(unit.replace("/opt/dreamd/.venv/bin/dreamd", dreamd_bin))
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(local)],
                            capture_output=True, text=True)
    assert (verify.stdout + verify.stderr).strip() == ""
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", str(local)],
                              capture_output=True, text=True)
    line = next(ln for ln in security.stdout.splitlines() if "Overall exposure level" in ln)
    exposure = float(line.split(":")[1].split()[0])
    assert exposure <= 2.0, line


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


WAL_BOUND_BYTES = 16 * 1024 * 1024
RSS_GROWTH_BOUND_KB = 25 * 1024
SOAK_PASSES = 600


@pytest.mark.soak
def test_many_passes_with_a_live_writer_keep_wal_and_memory_bounded(tmp_path: Path) -> None:
    """Compressed hours: 600 passes back to back (five hours at a 30 s interval)
    while the chat app writes 50 turns/s. The WAL stays under 16 MiB (passive checkpoints
    after each pass, the writer never blocked) and the daemon's RSS grows < 25 MiB after
    warm-up."""
    db = tmp_path / "memory.db"
    big_file(db, 50, 20)
    stop, report = tmp_path / "stop", tmp_path / "report.json"
    writer = subprocess.Popen(
        [sys.executable, "-m", "bench.chat_writer", str(db), "50", str(stop), str(report)],
        cwd=ROOT, env=dreamd_env())
    # Its logs go to files: a pipe nobody reads fills up and stalls the daemon.
    out, err_file = (tmp_path / "out.log").open("w"), (tmp_path / "err.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), "--loop", "0.05"],
                            cwd=ROOT, env=dreamd_env(DREAMD_SUMMARIZE__IDLE_MINUTES="0"),
                            stdout=out, stderr=err_file, text=True)
    wal = Path(f"{db}-wal")
    try:
        # Warm-up: 20 passes, however long a busy machine takes (a safety net, not a pace).
        assert wait_for(lambda: (query(db, "SELECT COUNT(*) FROM dreamd_runs", 0) or 0) >= 20,
                        180)
        warm = rss_kb(proc.pid)
        wal_sizes = []
        # The workload is a number of passes, however long this machine takes for them.
        soak_started = time.monotonic()
        deadline = soak_started + 1200  # a safety net, not a pace
        passes = 0
        while passes < SOAK_PASSES and time.monotonic() < deadline:
            wal_sizes.append(wal.stat().st_size if wal.exists() else 0)
            time.sleep(1)
            passes = query(db, "SELECT COUNT(*) FROM dreamd_runs")
        final = rss_kb(proc.pid)
    finally:
        stop.touch()
        writer.wait(timeout=30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()
        err_file.close()
    err = (tmp_path / "err.log").read_text()
    data = json.loads(report.read_text())
    assert proc.returncode == 0, err[-2000:]
    assert passes >= SOAK_PASSES
    assert data["errors"] == [] and data["ids"]  # never blocked past its busy timeout
    assert max(wal_sizes) <= WAL_BOUND_BYTES, wal_sizes
    assert final - warm <= RSS_GROWTH_BOUND_KB, (warm, final)
    assert query(db, "SELECT COUNT(*) FROM dreamd_runs WHERE outcome NOT IN "
                     "('ok', 'interrupted')") == 0
    consistent(db)
    print(f"soak: {passes} passes, WAL max {max(wal_sizes) / 1024:.0f} KiB, "
          f"RSS {warm / 1024:.1f} -> {final / 1024:.1f} MiB, writer p99 "
          f"{sorted(data['latencies'])[int(len(data['latencies']) * 0.99)] * 1000:.1f} ms")


def test_new_turns_wake_the_daemon_within_seconds(tmp_path: Path) -> None:
    """Caught up, the schedule would sleep 30 minutes; 30 new turns bring a pass within
    seconds (wake_on_turns_seconds after the last one), and only once for them."""
    db = tmp_path / "memory.db"
    big_file(db, 3, 4)
    proc = start(db, env=dreamd_env(DREAMD_SCHEDULE__WAKE_ON_TURNS_SECONDS="1"))
    try:
        # The first pass's length is the machine's (a busy box: a minute or more).
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs "
                                          "WHERE ended_at IS NOT NULL", 0) == 1, 180)
        time.sleep(2)
        assert query(db, "SELECT COUNT(*) FROM dreamd_runs") == 1  # nothing new: asleep
        conn = sqlite3.connect(db, isolation_level=None, timeout=10)
        from tests.helpers import add_turns, chat_texts

        add_turns(conn, "later", chat_texts(5, 30))
        conn.close()
        # Asleep for 30 minutes otherwise: a pass within two means the turns woke it.
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs "
                                          "WHERE ended_at IS NOT NULL", 0) == 2, 120)
        time.sleep(3)
        assert query(db, "SELECT COUNT(*) FROM dreamd_runs") == 2  # once for those turns
        assert query(db, "SELECT COUNT(*) FROM dreamd_exchange_vectors") == 42
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _scheduling(pid: int) -> list[tuple[int, int]]:
    """(nice, policy) of every thread of the process (proc(5): fields 19 and 41)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        found.append((int(fields[16]), int(fields[38])))
    return found


def test_a_process_that_runs_passes_keeps_numpy_s_blas_to_one_thread(tmp_path: Path) -> None:
    """The model's threads take every core; OpenBLAS's idle threads spin after each of
    numpy's products and took a core from them (in a 10k-turn pass, the facts job's model
    runs took 5.3-5.5 s with them, 4.8 s without). A process that runs passes keeps BLAS
    to one thread and gives large freed blocks back to the system, and its debug log says
    so."""
    db = tmp_path / "memory.db"
    big_file(db, 10, 6)
    env = dreamd_env(DREAMD_LOG__LEVEL="debug", DREAMD_LOG__FORMAT="json")
    done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    said = [e["threads"] for e in events if e.get("event") == "blas"]
    assert len(said) == 1 and said[0].startswith("one thread"), said
    # and freed blocks of 256 KiB or more go back to the system (glibc's mmap threshold)
    assert [e["large_blocks_unmapped"] for e in events if e.get("event") == "heap"] == [True]


def pass_processes(pid: int) -> list[int]:
    """The processes `pid` started (any thread of it): the running pass's, if any."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("background", [True, False])
def test_the_daemon_and_its_model_threads_run_at_background_priority(
        tmp_path: Path, background: bool) -> None:
    """The daemon's threads and those of a pass's process, the model's included."""
    db = tmp_path / "memory.db"
    big_file(db, 40, 20)  # 800 turns: a pass long enough to look at
    env = dreamd_env(DREAMD_EMBED__BACKEND="local",  # the model's own threads too
                     DREAMD_PASS__BACKGROUND=str(background).lower())
    # Started at nice +3 under the default policy, whatever this test process runs at
    # (another test may have run a pass in it): what dreamd then changes shows.
    given = os.getpriority(os.PRIO_PROCESS, 0) + 3
    proc = subprocess.Popen(["chrt", "--other", "0", "nice", "-n", "3", sys.executable, "-m",
                             "dreamd", "--db", str(db), "--loop", "60"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    in_pass: list[tuple[int, int]] = []

    def model_running() -> bool:
        """The pass's process, once its model has embedded something (it may end
        between two looks: then the next pass is looked at)."""
        if not query(db, "SELECT COUNT(*) FROM dreamd_exchange_vectors", 0):
            return False
        for child in pass_processes(proc.pid):
            with contextlib.suppress(OSError, ValueError, IndexError):
                in_pass[:] = _scheduling(child)
        return len(in_pass) >= 2

    try:
        assert wait_for(model_running, 180)
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs WHERE ended_at "
                                          "IS NOT NULL", 0), 300)  # 800 turns at nice +3
        threads = _scheduling(proc.pid)
        io = subprocess.run(["ionice", "-p", str(proc.pid)], capture_output=True,
                            text=True).stdout.strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert len(in_pass) >= 2  # its main thread and the model's
    if background:
        assert set(threads) | set(in_pass) == {(max(given, 10), os.SCHED_BATCH)}, threads
        assert io == "best-effort: prio 7"
    else:
        assert set(threads) | set(in_pass) == {(given, os.SCHED_OTHER)}, threads


@pytest.mark.parametrize("mode", [[], ["--loop", "600"]], ids=["daemon", "loop"])
def test_the_daemon_at_rest_holds_no_model(tmp_path: Path, mode: list[str]) -> None:
    """Between passes the daemon holds nothing a pass loaded: the pass ran the embedded
    model in a process of its own, which has ended; the daemon's process never mapped the
    model's runtime, the model file, the tokenizer or numpy, and is small (one that ran
    the pass itself held 243 MB or more until the next pass)."""
    db = tmp_path / "memory.db"
    big_file(db, 10, 6)
    proc = start(db, *mode, env=dreamd_env(DREAMD_EMBED__BACKEND="local"))
    try:
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs WHERE ended_at "
                                          "IS NOT NULL", 0) == 1, 120)
        assert wait_for(lambda: not pass_processes(proc.pid), 30)  # the pass's has ended
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        resident = rss_kb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert query(db, "SELECT COUNT(DISTINCT exchange_id) FROM dreamd_exchange_vectors") == 60
    assert query(db, "SELECT COUNT(*) FROM dreamd_runs") == 1  # asleep, not between passes
    held = [name for name in ("onnxruntime", "model.onnx", "tokenizers", "numpy")
            if name in maps]
    assert held == [], held
    assert resident < 100 * 1024, f"{resident / 1024:.0f} MB resident at rest"


def test_a_pass_process_killed_mid_pass_leaves_the_daemon_running(tmp_path: Path) -> None:
    """The kernel's OOM killer ends a pass's process: the daemon says so in one line, the
    pass is recorded as crashed, and the next pass does the work."""
    db = tmp_path / "memory.db"
    big_file(db, 100, 40)  # a first pass of several seconds
    proc = start(db, "--loop", "1")
    try:
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs", 0)
                        and pass_processes(proc.pid), 60)
        os.kill(pass_processes(proc.pid)[0], signal.SIGKILL)  # mid-pass
        assert wait_for(lambda: query(db, "SELECT COUNT(*) FROM dreamd_runs WHERE outcome = "
                                          "'ok' AND id > 1", 0), 300)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert query(db, "SELECT outcome FROM dreamd_runs WHERE id = 1") == "crashed"
    events = [json.loads(line) for line in out.splitlines()]
    errors = [e["error"] for e in events if e["event"] == "pass_error"]
    assert len(errors) == 1 and "ended by SIGKILL" in errors[0], errors
    consistent(db)


def test_a_log_event_is_written_whole_in_one_write() -> None:
    """The daemon and its pass's process share one log (stdout, a file or journald's
    pipe): an event written in two parts (its text, then its newline) let another
    process's event land between them, two events on one line. Each is one write."""
    import io

    from dreamd.runtime.log import configure, get_logger

    class Writes(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return super().write(text)

    stream = Writes()
    try:
        configure("info", "json", stream=stream)
        get_logger().info("pass_finished", ran=["embed"])
        get_logger().warning("leases_not_released", error="server closed the connection")
    finally:
        configure("info")
    assert len(stream.calls) == 2, stream.calls
    assert all(call.endswith("\n") and call.count("\n") == 1 for call in stream.calls)
    assert [json.loads(call)["event"] for call in stream.calls] == [
        "pass_finished", "leases_not_released"]

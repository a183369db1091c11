"""A stand-in chat app, run as its own process: inserts turns at a steady rate.

    python -m bench.chat_writer DB RATE STOPFILE REPORT [USERS]

DB is a SQLite file or a PostgreSQL URL. Each turn is its own short transaction, as a
chat server writes. With USERS, turns go round the users `w0`…, each into sessions of its
own (the sessions row written first). It stops when STOPFILE exists, then writes a JSON
report: ids inserted, errors seen, insert latencies, and (on Linux) how each latency
split: time running on a CPU and time runnable but waiting for one, from the kernel's
schedstat of the writing thread; the rest is time blocked (SQLite's lock, the disk).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def main(db: str, rate: float, stop_file: str, report: str, users: int = 0) -> None:
    if db.startswith(("postgresql://", "postgres://")):
        return write_pg(db, rate, stop_file, report, users)
    conn = sqlite3.connect(db, isolation_level=None, timeout=5)
    conn.execute("PRAGMA busy_timeout=5000")
    ids: list[int] = []
    locked: list[str] = []
    latencies: list[float] = []
    running: list[float] = []
    runnable: list[float] = []
    interval = 1.0 / rate
    next_at = time.monotonic()
    n = 0
    while not Path(stop_file).exists():
        session = f"live-{n // 40}"
        before = schedstat()
        started = time.perf_counter()
        try:
            cur = conn.execute(
                "INSERT INTO exchanges (session_id, role, content, created_at) VALUES (?,?,?,?)",
                (session, "user" if n % 2 == 0 else "assistant",
                 f"live turn {n}: talking about the weather and my plans",
                 datetime.now(UTC).isoformat()),
            )
            ids.append(int(cur.lastrowid or 0))
        except sqlite3.OperationalError as exc:
            locked.append(str(exc))
        latencies.append(time.perf_counter() - started)
        after = schedstat()
        running.append(after[0] - before[0])
        runnable.append(after[1] - before[1])
        n += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()
    Path(report).write_text(json.dumps({"ids": ids, "errors": locked, "latencies": latencies,
                                        "running": running, "runnable": runnable}))


def schedstat() -> tuple[float, float]:
    """Seconds this thread has run on a CPU, and waited runnable for one (proc(5))."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting, _ = f.read().split()
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def write_pg(url: str, rate: float, stop_file: str, report: str, users: int) -> None:
    """As a chat server does on PostgreSQL: a lost connection (a restart, a failover) is
    opened again at the next turn. A turn whose transaction the loss cut is *in doubt*:
    its commit may or may not have landed, and the report lists its text."""
    import psycopg

    conn: psycopg.Connection | None = None
    ids: list[int] = []
    errors: list[str] = []
    in_doubt: list[str] = []
    latencies: list[float] = []
    made: set[str] = set()  # sessions whose row is committed
    interval = 1.0 / rate
    next_at = time.monotonic()
    n = 0
    while not Path(stop_file).exists():
        user = n % users if users else 0
        session = f"live-w{user}-{n // (40 * max(users, 1))}"
        now = datetime.now(UTC).isoformat()
        content = f"live turn {n}: I walked to the harbour with Mika"
        started = time.perf_counter()
        began = False
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
                conn.execute("SET lock_timeout = '5s'")
            began = True
            with conn.transaction():
                if users and session not in made:
                    conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                                 "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                                 (session, session, now, f"w{user}"))
                row = conn.execute(
                    "INSERT INTO exchanges (session_id, role, content, created_at) "
                    "VALUES (%s, %s, %s, %s) RETURNING id",
                    (session, "user" if n % 2 == 0 else "assistant", content,
                     now)).fetchone()
            assert row is not None
            ids.append(int(row[0]))
            made.add(session)
        except psycopg.Error as exc:
            errors.append(str(exc).strip()[:200])
            if began and isinstance(exc, psycopg.OperationalError):
                in_doubt.append(content)
            if conn is not None and conn.broken:
                conn.close()
        latencies.append(time.perf_counter() - started)
        n += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    if conn is not None:
        conn.close()
    Path(report).write_text(json.dumps({"ids": ids, "errors": errors, "in_doubt": in_doubt,
                                        "latencies": latencies}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4],
         int(sys.argv[5]) if len(sys.argv) > 5 else 0)

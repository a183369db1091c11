"""A stand-in chat app, run as its own process: inserts turns at a steady rate.

    python -m bench.chat_writer DB RATE STOPFILE REPORT

Each turn is its own short transaction, as a chat server writes. It stops when STOPFILE
exists, then writes a JSON report: ids inserted, lock errors seen, insert latencies.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def main(db: str, rate: float, stop_file: str, report: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=5)
    conn.execute("PRAGMA busy_timeout=5000")
    ids: list[int] = []
    locked: list[str] = []
    latencies: list[float] = []
    interval = 1.0 / rate
    next_at = time.monotonic()
    n = 0
    while not Path(stop_file).exists():
        session = f"live-{n // 40}"
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
        n += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()
    Path(report).write_text(json.dumps({"ids": ids, "errors": locked, "latencies": latencies}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4])

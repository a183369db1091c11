"""A soak that would notice damage: a chat app on the system's SQLite writing about 200
turns a second with its default automatic checkpoint, dreamd (on its bundled SQLite)
passing beside it with its own checkpoints and killed with SIGKILL every few seconds;
then one clean pass, and the file is checked.

    python -m bench.soak [MINUTES] [RATE]        (3 minutes, 200 turns/s by default)

Prints the turns written, the kills, SQLite's integrity check and the rows lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dreamd.store.sqlite.driver import SYSTEM, library_version
from dreamd.store.sqlite.schema import CORE_TABLES
from testkit.consolidated import problems

ROOT = Path(__file__).parent.parent


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    return {**base, "DREAMD_EMBED__BACKEND": "hashing", "DREAMD_LOG__LEVEL": "error",
            "PYTHONPATH": str(ROOT)}


def passes_begun(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM dreamd_runs").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # dreamd has not made its tables yet
    finally:
        conn.close()


def soak(minutes: float = 3.0, rate: float = 200.0) -> int:
    work = Path(tempfile.mkdtemp(prefix="dreamd-soak-"))
    db, stop, report = work / "memory.db", work / "stop", work / "writer.json"
    app = sqlite3.connect(db, isolation_level=None)
    app.execute("PRAGMA journal_mode=WAL")
    app.executescript(CORE_TABLES)
    app.close()
    writer = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", str(db), str(rate),
                               str(stop), str(report)], cwd=ROOT, env=env())
    rng = random.Random(20261125)
    kills = started = 0
    deadline = time.monotonic() + minutes * 60
    while time.monotonic() < deadline:
        began = passes_begun(db)
        proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                                cwd=ROOT, env=env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while passes_begun(db) == began and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment of the pass
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        started += 1
        proc.wait(timeout=60)
    passes = passes_begun(db)
    stop.touch()
    writer.wait(timeout=60)
    written = json.loads(report.read_text())
    final = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                           cwd=ROOT, env=env(), capture_output=True, text=True, timeout=1800)
    found = problems(db, written["ids"])
    conn = sqlite3.connect(db)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        stored = {r[0] for r in conn.execute("SELECT id FROM exchanges")}
    finally:
        conn.close()
    lost = len(set(written["ids"]) - stored)
    print(f"soak: {minutes:g} min; the app (system SQLite {library_version(SYSTEM)}, automatic "
          f"checkpoint on) wrote {len(written['ids']):,} turns ({len(written['errors'])} "
          f"errors); dreamd (SQLite {library_version()}) started {started} times and began "
          f"{passes} passes, {kills} killed with SIGKILL; the app's INSERT p99 "
          f"{p99(written['latencies']):.2f} ms")
    print(f"soak: final pass exit {final.returncode}; integrity_check {integrity}; "
          f"{len(stored):,} turns stored; rows lost: {lost}; problems: {found or 'none'}")
    ok = final.returncode == 0 and not found and not written["errors"]
    if ok:
        for name in os.listdir(work):
            (work / name).unlink()
        work.rmdir()
    else:
        print(f"soak: the file is kept at {db}")
    return 0 if ok else 1


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(len(ordered) * 0.99)] * 1000 if ordered else 0.0


if __name__ == "__main__":
    try:
        args = [float(a) for a in sys.argv[1:3]]
    except ValueError:
        sys.exit("usage: python -m bench.soak [MINUTES] [RATE]")
    sys.exit(soak(*args))

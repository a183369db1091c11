"""Workers on PostgreSQL, side by side in one run (needs the PostgreSQL server binaries):

    python -m bench.workers [TURNS] [USERS] [default] [sqlite] [one-thread] [p99]
    python -m bench.workers sensing
    python -m bench.workers fleet [USERS] [TURNS] [N,N,...] [netem]

Over TURNS turns (default 100k) of USERS users (default 500), the parts named (default:
default, sqlite and p99):
- default: a first pass with the embedded default, PostgreSQL with one worker and with
  two; sqlite adds one dreamd on SQLite beside them;
- one-thread: the same two PostgreSQL passes with one model thread per process (how the
  work itself divides between workers);
- p99: the app's INSERT p99 on PostgreSQL alone and during a two-worker pass;
- `sensing`: a pass's sensing and owner check in a 1M-turn, 500-user store kept up to
  date, on PostgreSQL, against the prior art's GROUP BY over every turn there (the
  SQLite figure is `python -m bench.run sensing-users`).
- `fleet`: N workers (default 1, 4, 16 and 64) started together over USERS users
  (default 2,000) and TURNS turns (default 12,000), with the hashing embedder and the
  extractive completer, beside the app inserting 100 turns a second: turns consolidated
  per second, dreamd's transactions per second, the share of its backends' busy time
  spent waiting for a lock (sampled from pg_stat_activity), the lock waits over 5 ms the
  server logged, the app's INSERT p99, and the median worker's resident set a quarter
  into its pass, half-way and at its end (flat, or growing with the users it has
  done). Over the Unix socket, or with `netem` over TCP with 1 ms added to every round
  trip (a network namespace whose loopback delays each packet 0.5 ms; where the kernel
  has no netem, `bench.delay` holds each client message 1 ms instead, and the line says
  so and gives the `SELECT 1` round trip).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.generate import generate
from testkit.pg import PgServer

OUT = Path(__file__).resolve().parent / "out"
ROOT = Path(__file__).resolve().parent.parent


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    # The whole first pass is timed: no wall-time budget cuts it short.
    out.update({"DREAMD_LOG__FORMAT": "json", "DREAMD_PASS__MAX_SECONDS": "0",
                "PYTHONPATH": str(ROOT)}, **extra)
    return out


def copy_into(source: Path, url: str) -> None:
    """The generated chat history into a PostgreSQL database, as the app would have it."""
    import psycopg

    from dreamd.config import Config
    from dreamd.memory.api import Memory

    Memory(url, config=Config(db=url)).close()  # dreamd's tables, with the app's
    lite = sqlite3.connect(source)
    with psycopg.connect(url) as conn:
        with conn.cursor().copy("COPY sessions (id, name, created_at, user_id) FROM STDIN") as cp:
            for row in lite.execute("SELECT id, name, created_at, "
                                    "COALESCE(user_id, 'default') FROM sessions"):
                cp.write_row(row)
        with conn.cursor().copy("COPY exchanges (id, session_id, role, content, created_at) "
                                "FROM STDIN") as cp:
            for row in lite.execute("SELECT id, session_id, role, content, created_at "
                                    "FROM exchanges ORDER BY id"):
                cp.write_row(row)
        conn.execute("SELECT setval(pg_get_serial_sequence('exchanges', 'id'), "
                     "(SELECT MAX(id) FROM exchanges))")
    lite.close()


def passes(db: str, workers: int, extra: dict[str, str] | None = None,
           rss: list[list[int]] | None = None) -> float:
    """Wall seconds until `workers` dreamd processes, started together, have all exited;
    `rss` gets each one's resident set (kB) sampled every quarter second."""
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(workers)]
        started = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-m", "dreamd", "--db", db, "--force"],
                                  stdout=log, stderr=subprocess.STDOUT, text=True,
                                  env=env(**(extra or {})), cwd=ROOT) for log in logs]
        if rss is not None:
            rss[:] = [[] for _ in procs]
            while any(proc.poll() is None for proc in procs):
                for proc, seen in zip(procs, rss, strict=True):
                    kb = rss_kb(proc.pid) if proc.poll() is None else 0
                    if kb:
                        seen.append(kb)
                time.sleep(0.25)
        for proc, log in zip(procs, logs, strict=True):
            proc.wait()
            if proc.returncode != 0:  # a failed job exits 1 and says so in its log
                log.seek(0)
                tail = "".join(log.readlines()[-5:])
                raise SystemExit(f"dreamd exited {proc.returncode}:\n{tail}")
    return time.perf_counter() - started


def rss_kb(pid: int) -> int:
    """A live process's resident set in kB (0 once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("VmRSS:")), 0)


def rss_line(rss: list[list[int]]) -> str:
    """Each worker's resident set a quarter into its pass, half-way, at its end and at its
    peak (the median worker's, MB): flat when the first three are near."""
    lives = [seen for seen in rss if len(seen) >= 4]
    if not lives:
        return "worker RSS not sampled (passes under a second)"

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2] / 1024

    quarter = median([seen[len(seen) // 4] for seen in lives])
    half = median([seen[len(seen) // 2] for seen in lives])
    end = median([seen[-1] for seen in lives])
    peak = median([max(seen) for seen in lives])
    return (f"worker RSS (median of {len(lives)}): {quarter:.0f} MB a quarter into its "
            f"pass, {half:.0f} MB half-way, {end:.0f} MB at its end, peak {peak:.0f} MB")


def caught_up(url: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT COUNT(*) FROM dreamd_sessions WHERE last_id > summarized_id "
                           "OR last_id > facts_id").fetchone()
    return row is not None and row[0] == 0


def insert_p99(url: str, seconds: float, during: Any = None) -> tuple[float, int]:
    """The app's INSERT latency p99 (ms) at 100 turns/s for `seconds`, optionally while
    `during()` runs."""
    stop = Path(tempfile.mkdtemp()) / "stop"
    report = stop.with_name("report.json")
    writer = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", url, "100",
                               str(stop), str(report), "50"], cwd=ROOT, env=env())
    if during is not None:
        during()
    else:
        time.sleep(seconds)
    stop.touch()
    writer.wait()
    data = json.loads(report.read_text())
    lat = sorted(data["latencies"])
    return lat[int(0.99 * (len(lat) - 1))] * 1000, len(data["errors"])


def copy_state(source: Path, url: str) -> None:
    """The SQLite file's turns and dreamd's state of them (tally, gists, marks) into a
    PostgreSQL database: the same store, kept up to date, on the other engine."""
    import psycopg

    from dreamd.config import Config
    from dreamd.memory.api import Memory

    Memory(url, config=Config(db=url)).close()
    lite = sqlite3.connect(source)
    tables = {
        "sessions": "id, name, created_at, user_id",
        "exchanges": "id, session_id, role, content, created_at",
        "summaries": "session_id, content, last_exchange_id, created_at, user_id, dreamd_seq, "
                     "dreamd_month",
        "dreamd_sessions": "session_id, user_id, turns, first_id, last_id, first_at, last_at, "
                           "month, summarized_id, summarized_turns, facts_id, facts_turns",
        "dreamd_embed_state": "model, dim, last_exchange_id",
        "self_state": "id, data, updated_at",
    }
    with psycopg.connect(url) as conn:
        conn.execute("ALTER TABLE sessions DISABLE TRIGGER USER")  # a copy, not the app
        for table, columns in tables.items():
            with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as cp:
                for row in lite.execute(f"SELECT {columns} FROM {table}"):
                    cp.write_row(row)
        conn.execute("ALTER TABLE sessions ENABLE TRIGGER USER")
        conn.execute("DELETE FROM dreamd_tier_queue")
        conn.execute("DELETE FROM dreamd_owner_queue")
        for key, value in lite.execute("SELECT key, value FROM dreamd_state"):
            conn.execute("INSERT INTO dreamd_state VALUES (%s, %s) ON CONFLICT (key) "
                         "DO UPDATE SET value = excluded.value", (key, value))
        conn.execute("SELECT setval(pg_get_serial_sequence('exchanges', 'id'), "
                     "(SELECT MAX(id) FROM exchanges))")
    lite.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def sensing() -> None:
    from bench.run import PRIOR_ART_BACKLOG, bench_sensing, timed
    from dreamd.config import Config
    from dreamd.dream.sensing import read_backlog, sync_owners
    from dreamd.store.opening import open_store
    from dreamd.store.tally import sync_tally

    source = OUT / "sensing-1m-500u.db"
    if not source.exists():
        bench_sensing(500)  # builds it, and prints the SQLite figure
    server = PgServer()
    try:
        url = server.new_database()
        copy_state(source, url)
        store = open_store(Config(db=url))
        now = __import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").UTC)
        stats = read_backlog(store, Config(), now, "m")

        def ours() -> None:
            sync_tally(store)
            read_backlog(store, Config(), now, "m")

        ours_s = timed(ours, 30)
        owners_s = timed(lambda: sync_owners(store, "assistant"), 10)
        # The same GROUP BY; PostgreSQL wants the joined key named in it too.
        prior = PRIOR_ART_BACKLOG.replace("GROUP BY e.session_id",
                                          "GROUP BY e.session_id, su.session_id")
        prior_s = timed(lambda: store.raw.execute(prior).fetchall(), 5)  # type: ignore[attr-defined]
        rows = store.raw.execute(prior).fetchall()  # type: ignore[attr-defined]
        store.close()
        assert stats.dirty == sum(1 for u, _ in rows if u), stats.dirty
        both = ours_s + owners_s
        print(f"sensing on PostgreSQL: 1,000,000 turns / 20,000 sessions / 500 users, "
              f"{stats.dirty} dirty: dreamd {ours_s * 1000:.1f} ms + owner check "
              f"{owners_s * 1000:.2f} ms vs prior-art GROUP BY {prior_s * 1000:.0f} ms -> "
              f"{prior_s / both:.0f}x faster")
    finally:
        server.stop()


FLEET = (1, 4, 16, 64)
NETNS = "dreamd-fleet"
FLEET_PORT = 54329


def one(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """The one row a statement returns."""
    row = conn.execute(sql, params or None).fetchone()  # no parameters: a % is a %
    assert row is not None, sql
    return tuple(row)


def fleet_pass(server: PgServer, source: Path, workers: int,
               reach: Callable[[str], str] = lambda url: url) -> dict[str, Any]:
    """`workers` dreamd processes started together on a new copy of the store, with
    instant backends (the hashing embedder, the extractive completer: the store is what
    is measured), beside the app inserting 100 turns a second. The server's view is
    sampled meanwhile: its dreamd backends in a transaction, and those waiting for a
    lock (an advisory lock: the fleet's own locks), and the round trip of `SELECT 1`
    the way the workers reach the server (`reach` turns the bench's URL into theirs)."""
    import psycopg

    direct = server.new_database()
    copy_into(source, direct)
    url = reach(direct)
    database = urlsplit(direct).path.lstrip("/")
    with psycopg.connect(direct) as conn:
        turns = int(one(conn, "SELECT COUNT(*) FROM exchanges")[0])
    log = server.root / "log"
    log_start = log.stat().st_size
    done = threading.Event()
    samples = {"busy": 0, "lock": 0, "advisory": 0}
    trips: list[float] = []

    def sample() -> None:
        with psycopg.connect(server.url(), autocommit=True) as conn, \
                psycopg.connect(reach(server.url()), autocommit=True) as probe:
            while not done.is_set():
                started = time.perf_counter()
                probe.execute("SELECT 1").fetchone()
                trips.append(time.perf_counter() - started)
                row = one(
                    conn, "SELECT COUNT(*) FILTER (WHERE state <> 'idle'), "
                    "COUNT(*) FILTER (WHERE wait_event_type = 'Lock'), "
                    "COUNT(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = "
                    "'advisory') FROM pg_stat_activity WHERE datname = %s AND "
                    "application_name = 'dreamd'", (database,))
                for key, value in zip(samples, row, strict=True):
                    samples[key] += int(value)
                time.sleep(0.01)

    def commits() -> int:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            return int(one(conn, "SELECT COALESCE(SUM(xact_commit), 0) FROM "
                           "pg_stat_database WHERE datname = %s", (database,))[0])

    stop = Path(tempfile.mkdtemp()) / "stop"
    report = stop.with_name("report.json")
    writer = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", url, "100",
                               str(stop), str(report), "50"], cwd=ROOT, env=env())
    time.sleep(1.5)  # the writer connected and writing; the copy's counts reported
    sampler = threading.Thread(target=sample, daemon=True)
    before = commits()
    sampler.start()
    rss: list[list[int]] = []
    wall = passes(url, workers, {"DREAMD_EMBED__BACKEND": "hashing",
                                 "DREAMD_COMPLETER__BACKEND": "extractive",
                                 "DREAMD_WORKERS__LEASE_SECONDS": "60"}, rss)
    done.set()
    sampler.join()
    after = commits()
    stop.touch()
    writer.wait()
    written = json.loads(report.read_text())
    lat = sorted(written["latencies"])
    with psycopg.connect(direct) as conn:  # every turn there before the fleet started, done
        left = one(
            conn, "SELECT COUNT(*) FILTER (WHERE last_id > summarized_id OR last_id > "
            "facts_id), (SELECT COUNT(*) FROM exchanges e WHERE e.session_id NOT LIKE "
            "'live-%' AND NOT EXISTS (SELECT 1 FROM dreamd_exchange_vectors v WHERE "
            "v.exchange_id = e.id)) FROM dreamd_sessions WHERE session_id NOT LIKE 'live-%'")
    assert left == (0, 0), f"left undone: {left[0]} sessions, {left[1]} turns"
    with log.open("rb") as f:
        f.seek(log_start)
        waits = [ln for ln in f.read().decode(errors="replace").splitlines()
                 if "still waiting for" in ln]
    return {"workers": workers, "wall": wall, "turns": turns,
            "tps": (after - before - len(written["ids"])) / wall,
            "lock_share": samples["lock"] / max(1, samples["busy"]),
            "advisory_share": samples["advisory"] / max(1, samples["busy"]),
            "waits": len(waits), "advisory_waits": sum("advisory lock" in w for w in waits),
            "p99": lat[int(0.99 * (len(lat) - 1))] * 1000, "errors": len(written["errors"]),
            "trip": sorted(trips)[len(trips) // 2] * 1000 if trips else 0.0,
            "rss": rss_line(rss)}


def fleet(users: int, turns: int, counts: tuple[int, ...], latency: str) -> None:
    """The fleet's lines: each N, over the Unix socket (`latency` "socket"), or over TCP
    with 1 ms added to each round trip: through a loopback device that delays every
    packet 0.5 ms ("netem", inside a network namespace), or through `bench.delay`
    holding each client message ("proxy", where the kernel has no netem: asyncio's
    millisecond steps make that 1.5-2 ms)."""
    OUT.mkdir(exist_ok=True)
    source = OUT / f"fleet-{users}u-{turns}.db"
    if not source.exists():
        generate(source, turns, max(users, turns // 10), users=users, months=6)
    settings = ("-c max_connections=400 -c log_lock_waits=on -c deadlock_timeout=5ms "
                "-c shared_buffers=256MB")
    proxy: subprocess.Popen[bytes] | None = None
    reach: Callable[[str], str] = lambda url: url  # noqa: E731
    if latency == "netem":
        server = PgServer(port=FLEET_PORT, inside=["ip", "netns", "exec", NETNS],
                          settings=settings)
        where = "TCP, 1 ms added by netem"
    else:
        server = PgServer(settings=settings)
        where = "Unix socket"
    if latency == "proxy":
        proxy = subprocess.Popen([sys.executable, "-m", "bench.delay", str(FLEET_PORT),
                                  str(server.root / ".s.PGSQL.5432"), "0.5"], cwd=ROOT,
                                 env=env())
        time.sleep(1.0)

        def reach(url: str) -> str:
            return f"postgresql://postgres@127.0.0.1:{FLEET_PORT}{urlsplit(url).path}"

        where = "TCP through a proxy holding each client message"
    try:
        for n in counts:
            r = fleet_pass(server, source, n, reach)
            print(f"fleet: {r['turns']:,} turns / {users:,} users, {where} (SELECT 1 "
                  f"{r['trip']:.2f} ms), {n:>2} workers: {r['turns'] / r['wall']:,.0f} "
                  f"turns/s ({r['wall']:.1f} s); {r['tps']:,.0f} dreamd transactions/s; "
                  f"dreamd backends waiting for a lock {r['lock_share']:.1%} of their busy "
                  f"time (advisory {r['advisory_share']:.1%}); waits over 5 ms logged "
                  f"{r['waits']} (advisory {r['advisory_waits']}); app INSERT p99 "
                  f"{r['p99']:.2f} ms, errors {r['errors']}; {r['rss']}", flush=True)
    finally:
        if proxy is not None:
            proxy.terminate()
        server.stop()


def with_netem(argv: list[str]) -> bool:
    """Run this bench again inside a network namespace of its own whose loopback device
    delays every packet 0.5 ms (needs root, and iproute2's ip and tc); False, having run
    nothing, where the kernel has no netem."""
    steps = [["ip", "netns", "add", NETNS],
             ["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"]]
    netem = ["ip", "netns", "exec", NETNS, "tc", "qdisc", "add", "dev", "lo", "root",
             "netem", "delay", "0.5ms"]
    try:
        for step in steps:
            subprocess.run(step, check=True)
        if subprocess.run(netem, capture_output=True).returncode != 0:
            return False
        subprocess.run(["ip", "netns", "exec", NETNS, sys.executable, "-m", "bench.workers",
                        *argv], check=True, cwd=ROOT,
                       env={**os.environ, "DREAMD_BENCH_NETNS": NETNS,
                            "PYTHONPATH": str(ROOT)})
        return True
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], check=False)


PARTS = ("sqlite", "default", "one-thread", "p99")


def main() -> None:
    if sys.argv[1:2] == ["sensing"]:
        return sensing()
    if sys.argv[1:2] == ["fleet"]:
        # fleet [USERS] [TURNS] [N,N,...] [netem]
        args = [a for a in sys.argv[2:] if a != "netem"]
        netem = "netem" in sys.argv[2:]
        latency = "netem" if netem else "socket"
        if netem and not os.environ.get("DREAMD_BENCH_NETNS"):
            if with_netem(sys.argv[1:]):
                return None
            print("fleet: this kernel has no netem qdisc; a proxy holding each client "
                  "message stands in (asyncio wakes at millisecond steps: see the round "
                  "trip of SELECT 1 on each line)", flush=True)
            latency = "proxy"
        users = int(args[0]) if args else 2000
        turns = int(args[1]) if len(args) > 1 else 12_000
        counts = tuple(int(n) for n in args[2].split(",")) if len(args) > 2 else FLEET
        return fleet(users, turns, counts, latency)
    args = [a for a in sys.argv[1:] if a not in PARTS]
    parts = {a for a in sys.argv[1:] if a in PARTS} or {"sqlite", "default", "p99"}
    turns = int(args[0]) if args else 100_000
    users = int(args[1]) if len(args) > 1 else 500
    OUT.mkdir(exist_ok=True)
    source = OUT / f"workers-{turns}.db"
    generate(source, turns, turns // 50, users=users, months=6)
    server = PgServer()

    def one_and_two(**extra: str) -> tuple[float, float]:
        one, two = server.new_database(), server.new_database()
        copy_into(source, one)
        copy_into(source, two)
        one_s = passes(one, 1, extra)
        two_s = passes(two, 2, extra)
        assert caught_up(one) and caught_up(two)
        return one_s, two_s

    try:
        head = f"workers: first pass over {turns:,} turns / {users} users, embedded default:"
        if "default" in parts:
            one_s, two_s = one_and_two()
            versus = ""
            if "sqlite" in parts:
                lite = OUT / f"workers-{turns}-sqlite.db"
                lite.write_bytes(source.read_bytes())
                sqlite_s = passes(str(lite), 1)
                versus = (f"; SQLite 1 dreamd {sqlite_s:.1f} s "
                          f"(PostgreSQL / SQLite {one_s / sqlite_s:.2f}x)")
            print(f"{head} PostgreSQL 1 worker {one_s:.1f} s, 2 workers {two_s:.1f} s -> "
                  f"{one_s / two_s:.2f}x{versus}", flush=True)
        if "one-thread" in parts:
            # The local model uses every core it may in one process; one thread each
            # shows how the work itself divides between workers.
            one_s, two_s = one_and_two(DREAMD_EMBED__THREADS="1")
            print(f"{head} one model thread per process: PostgreSQL 1 worker {one_s:.1f} s, "
                  f"2 workers {two_s:.1f} s -> {one_s / two_s:.2f}x", flush=True)
        if "p99" in parts:
            third = server.new_database()
            copy_into(source, third)
            alone, errors_alone = insert_p99(third, 30)
            during, errors_during = insert_p99(third, 0, lambda: passes(third, 2))
            print(f"workers: app INSERT p99 at 100 turns/s on PostgreSQL, {turns:,} turns: "
                  f"alone {alone:.2f} ms, during a 2-worker pass {during:.2f} ms "
                  f"({during / alone:.2f}x); errors {errors_alone} / {errors_during}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

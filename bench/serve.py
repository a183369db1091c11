"""The server's cost, side by side in one run.

    python -m bench.serve [context] [insert] [--turns 100000] [--users 500] [--requests 200]

context: `GET /v1/context` through `dreamd serve` against the same call on an
         in-process Memory at 1, 8 and 32 concurrent clients; then the server's resident
         memory after serving every user.
insert:  the chat app's INSERT p99 (50 turns/s) during a `dreamd --force` pass over 5,000
         turns, with the server answering 32 concurrent context clients, against the
         same pass without the server (three runs each).

The file is generated (bench/generate.py), consolidated once with the hashing embedder
and the extractive completer (so the store and the server are what is measured), and
reused between runs under bench/out/.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.generate import generate
from bench.llm import writer_latency, writer_p99
from dreamd.backends.hashing import HashingEmbedder
from dreamd.config import load
from dreamd.memory.api import Memory
from testkit.served import ROOT, Served, env_for

OUT = Path(__file__).parent / "out"
QUERIES = ("what did we talk about last week?", "how is the new job going?",
           "any plans for the weekend?", "how are the kids?")


def prepared(turns: int, users: int) -> Path:
    path = OUT / f"serve-{turns}-{users}.db"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        generate(path, turns=turns, sessions=max(users, turns // 50), users=users, months=12)
        done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(path), "--force"],
                              cwd=ROOT, env=env_for(), capture_output=True, text=True)
        if done.returncode != 0:
            path.unlink()
            raise SystemExit(f"the pass failed: {done.stderr[-500:]}")
    return path


def timed(clients: int, requests: int, call: Callable[[int, int], None]) -> tuple[float, ...]:
    """p50 and p99 in ms, and requests per second, of `requests` calls per client."""
    seconds: list[float] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        mine = []
        for i in range(requests):
            started = time.perf_counter()
            call(n, i)
            mine.append(time.perf_counter() - started)
        with lock:
            seconds.extend(mine)

    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    cuts = statistics.quantiles(seconds, n=100)
    return cuts[49] * 1000, cuts[98] * 1000, len(seconds) / wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts", nargs="*", choices=("context", "insert"),
                        default=["context", "insert"])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--requests", type=int, default=200, help="in all, per level")
    args = parser.parse_args()
    if "context" in args.parts:
        bench_context(args)
    if "insert" in args.parts:
        bench_insert()


def bench_context(args: argparse.Namespace) -> None:
    path = prepared(args.turns, args.users)
    users = [f"u{u}" for u in range(args.users)]  # as bench.generate files them
    config = load(None, environ=env_for(), db=str(path))
    embedder = HashingEmbedder()
    local = threading.local()

    def in_process(n: int, i: int) -> None:
        if not hasattr(local, "memory"):  # one Memory per thread: reads in parallel
            local.memory = Memory(path, config=config, embedder=embedder, create=False,
                                  sqlite="bundled")
        user = users[(n * 7919 + i) % len(users)]
        local.memory.context(user=user, query=QUERIES[i % len(QUERIES)], budget=1000)

    server = Served(str(path))
    try:
        with server.client() as http:
            assert http.get("/readyz").status_code == 200
            clients = threading.local()

            def over_http(n: int, i: int) -> None:
                if not hasattr(clients, "http"):
                    clients.http = server.client()
                user = users[(n * 7919 + i) % len(users)]
                answer = clients.http.get("/v1/context", params={
                    "user": user, "q": QUERIES[i % len(QUERIES)], "budget": 1000})
                assert answer.status_code == 200, answer.text

            for n in (1, 8, 32):
                each = max(1, args.requests // n)
                a = timed(n, each, in_process)
                b = timed(n, each, over_http)
                print(f"context, {n:2d} clients: in-process p50 {a[0]:.1f} ms p99 {a[1]:.1f} "
                      f"ms {a[2]:.0f}/s | server p50 {b[0]:.1f} ms p99 {b[1]:.1f} ms "
                      f"{b[2]:.0f}/s -> p50 x{b[0] / a[0]:.2f}, throughput x{b[2] / a[2]:.2f}",
                      flush=True)
            for user in users:  # every user's matrix once, as a busy server would
                http.get("/v1/recall", params={"user": user, "q": "job", "k": 5})
            status = Path(f"/proc/{server.process.pid}/status").read_text()
            rss = {k: v.split()[0] for k, v in (ln.split(":", 1) for ln in status.splitlines())
                   if k in ("VmRSS", "VmHWM")}
            print(f"server RSS at {args.turns:,} turns / {args.users} users: "
                  f"{int(rss['VmRSS']) // 1024} MB (peak {int(rss['VmHWM']) // 1024} MB)")
    finally:
        server.stop()


def insert_run(tmp: Path, run: int, served: bool) -> tuple[float, tuple[float, ...]]:
    """(writer p99 alone, (p99 during the pass, its slowest 1 %'s split)), in ms."""
    db = tmp / f"insert-{run}-{int(served)}.db"
    generate(db, turns=5000, sessions=100, users=10, months=3, seed=run)
    alone = writer_p99(db, 5.0)
    server = Served(str(db)) if served else None
    stop = threading.Event()

    def load(n: int) -> None:
        assert server is not None
        with server.client() as http:
            i = 0
            while not stop.is_set():
                http.get("/v1/context", params={"user": f"u{(n + i) % 10}", "budget": 1000,
                                                "q": QUERIES[i % len(QUERIES)]})
                i += 1

    clients = [threading.Thread(target=load, args=(n,)) for n in range(32 if served else 0)]
    for t in clients:
        t.start()
    flag, box = tmp / f"done-{run}-{int(served)}", dict[str, tuple[float, ...]]()
    measure = threading.Thread(target=lambda: box.update(p99=writer_latency(db, None, flag)))
    measure.start()
    done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                          cwd=ROOT, env=env_for(), capture_output=True, text=True)
    flag.touch()
    measure.join()
    stop.set()
    for t in clients:
        t.join()
    if server is not None:
        server.stop()
    assert done.returncode == 0, done.stderr[-500:]
    return alone, box["p99"]


def bench_insert(runs: int = 3) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        without = [insert_run(Path(tmp), run, served=False) for run in range(runs)]
        served = [insert_run(Path(tmp), run, served=True) for run in range(runs)]
    for label, results in (("without the server", without),
                            ("server under 32 clients", served)):
        deltas = sorted(p[0] - a for a, p in results)
        each = ", ".join(f"{p[0]:.2f} vs {a:.2f}" for a, p in results)
        split = [statistics.median(p[i] for _, p in results) for i in (2, 3)]
        print(f"INSERT p99 during a pass, {label}: {each} ms -> median "
              f"+{statistics.median(deltas):.2f} ms; the slowest 1 % waited {split[0]:.2f} "
              f"ms runnable (CPU), {split[1]:.2f} ms blocked (lock, disk)", flush=True)


if __name__ == "__main__":
    main()

"""LLM-backend benchmarks against the local OpenAI-compatible test server.

    python -m bench.llm [tokens] [throughput]

tokens:     one session grows to 400 turns in 20-turn steps; its gist is kept current
            incrementally (dreamd) vs re-summarized from the whole transcript each step
            (the prior art). Input tokens as the server counts them.
throughput: 500 sessions through a server (its own process) answering in 100 ms: 8
            workers vs 1, and the chat writer's INSERT latency (p99) during each pass vs
            alone.
window:     the profile of 500 gists for a model with a 4,096-token window: the calls and
            input tokens folded in parts vs all at once (which such a model refuses).
acceptance: the output guards on the good and bad answer corpora (tests/data/answers_*),
            kept and refused per check and per job; the off-topic floor chosen on one
            person's requests, checked on the other's; requests per gist on the sample
            conversations when the server answers as a capable model; and, where
            ../shared/data is, the LoCoMo dev slice answered with its own session
            summaries and observations (bench/capable.py): gists and facts kept from the
            model, requests per item.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.generate import turn_text
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.config import CompleterConfig, Config, EmbedConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.summarize import gist_for
from dreamd.ids import DEFAULT_USER
from dreamd.models import Turn
from dreamd.runtime.log import configure
from dreamd.store.opening import open_store
from dreamd.store.sqlite.schema import CORE_TABLES
from testkit.openai_server import FakeOpenAI

START = datetime(2025, 3, 1, tzinfo=UTC)


def new_file(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(CORE_TABLES)
    return conn


def config_for(db: Path, server: FakeOpenAI | ServerProcess, workers: int = 1) -> Config:
    completer = CompleterConfig(backend="openai", base_url=server.base_url, model="bench",
                                workers=workers, read_timeout_seconds=10)
    return Config(db=str(db), embed=EmbedConfig(backend="hashing"), completer=completer)


def bench_tokens() -> None:
    server = FakeOpenAI(pad=700).start()  # gists of ~700 characters, like a real LLM's
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        chat = new_file(db)
        config = config_for(db, server)
        store = open_store(config)
        completer = OpenAICompleter(config.completer, environ={})
        ctx = JobContext.for_pass(store, config, HashingEmbedder(), completer, Budget())
        incremental = whole = 0
        turns: list[Turn] = []
        for step in range(20):
            for i in range(20):
                n = step * 20 + i
                role = "user" if n % 2 == 0 else "assistant"
                text = turn_text(rng, role, rng.choice(["work", "running", "my sister"]))
                at = (START + timedelta(minutes=n)).isoformat()
                cur = chat.execute("INSERT INTO exchanges (session_id, role, content, "
                                   "created_at) VALUES ('s', ?, ?, ?)", (role, text, at))
                turns.append(Turn(int(cur.lastrowid or 0), "s", role, text, at))
            result = run_pass(store, config, ctx.embedder, completer, trigger="bench",
                              force=True)
            incremental += next(j for j in result.jobs if j.job == "summarize").tokens_in
            before = ctx.state.tokens.used_in
            gist_for(ctx, DEFAULT_USER, None, turns, {})  # the prior art: all of it again
            whole += ctx.state.tokens.used_in - before
        store.close()
        chat.close()
    server.stop()
    print(f"tokens: one session to 400 turns in 20-turn steps: incremental {incremental:,} "
          f"input tokens vs whole transcript {whole:,} -> {whole / incremental:.1f}x fewer")


def writer_p99(db: Path, seconds: float | None, stop_when: Path | None = None) -> float:
    """Run the chat writer at 50 turns/s; return its INSERT p99 in ms."""
    return writer_latency(db, seconds, stop_when)[0]


def writer_latency(db: Path, seconds: float | None, stop_when: Path | None = None
                   ) -> tuple[float, float, float, float]:
    """Run the chat writer at 50 turns/s: its INSERT p99 in ms, and what the slowest 1 %
    of its INSERTs spent on average: running, runnable but not running (the CPU was
    someone else's), and blocked (SQLite's lock, the disk)."""
    with tempfile.TemporaryDirectory() as tmp:
        stop, report = Path(tmp) / "stop", Path(tmp) / "report.json"
        proc = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", str(db), "50",
                                 str(stop), str(report)])
        if seconds is not None:
            time.sleep(seconds)
        else:
            while stop_when is not None and not stop_when.exists():
                time.sleep(0.05)
        stop.touch()
        proc.wait(timeout=30)
        data = json.loads(report.read_text())
    rows = sorted(zip(data["latencies"], data["running"], data["runnable"], strict=True))
    slowest = rows[int(len(rows) * 0.99):]
    running = statistics.fmean(r[1] for r in slowest)
    runnable = statistics.fmean(r[2] for r in slowest)
    blocked = statistics.fmean(r[0] for r in slowest) - running - runnable
    return (rows[int(len(rows) * 0.99)][0] * 1000, running * 1000, runnable * 1000,
            max(0.0, blocked) * 1000)


def timed_pass(db: Path, server: ServerProcess, workers: int, done_flag: Path) -> float:
    """`dreamd --force` as it runs in production (its own process, at the priority it
    gives itself); the pass's own time from its run record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env.update({"DREAMD_EMBED__BACKEND": "hashing", "DREAMD_COMPLETER__BACKEND": "openai",
                "DREAMD_COMPLETER__BASE_URL": server.base_url, "DREAMD_COMPLETER__MODEL":
                "bench", "DREAMD_COMPLETER__WORKERS": str(workers),
                "DREAMD_COMPLETER__READ_TIMEOUT_SECONDS": "10", "OPENAI_API_KEY": "bench",
                "DREAMD_LOG__LEVEL": "warning"})
    done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                          env=env, capture_output=True, text=True)
    done_flag.touch()
    assert done.returncode == 0, done.stderr[-1000:]
    conn = sqlite3.connect(db)
    started, ended, jobs = conn.execute("SELECT started_at, ended_at, jobs FROM dreamd_runs "
                                        "ORDER BY id DESC LIMIT 1").fetchone()
    conn.close()
    summarize = next(j for j in json.loads(jobs) if j["job"] == "summarize")
    assert summarize["done"] >= 500, summarize  # plus the live sessions the writer opened
    return (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds()


class ServerProcess:
    """The test server in a process of its own, as a real LLM server would be: its
    request handling does not share dreamd's interpreter."""

    def __init__(self, delay: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "testkit.openai_server", str(delay)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()


def throughput_run(tmp: Path, server: ServerProcess, workers: int, run: int,
                   rng: random.Random) -> tuple[float, float, float, tuple[float, ...]]:
    """One pass over a fresh 500-session file: (seconds, writer p99 alone, p99 during,
    the slowest 1 %'s split during: running, runnable, blocked)."""
    import threading

    db = tmp / f"w{workers}-{run}.db"
    chat = new_file(db)
    rows = [(f"s{s}", role, turn_text(rng, role, "work"),
             (START + timedelta(minutes=n)).isoformat())
            for s in range(500)
            for n, role in enumerate(["user", "assistant"] * 3)]
    chat.execute("BEGIN")
    chat.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                     "VALUES (?, ?, ?, ?)", rows)
    chat.execute("COMMIT")
    chat.close()
    alone = writer_p99(db, 5.0)
    flag = tmp / f"done{workers}-{run}"
    box: dict[str, tuple[float, float, float, float]] = {}

    def measure() -> None:
        box["during"] = writer_latency(db, None, stop_when=flag)

    thread = threading.Thread(target=measure)
    thread.start()
    elapsed = timed_pass(db, server, workers, flag)
    thread.join()
    return elapsed, alone, box["during"][0], box["during"][1:]


def p99_line(label: str, runs: list[tuple[float, float, float, tuple[float, ...]]]) -> str:
    deltas = sorted(p - a for _, a, p, _ in runs)
    each = ", ".join(f"{p:.2f} vs {a:.2f}" for _, a, p, _ in runs)
    split = [statistics.median(r[3][i] for r in runs) for i in range(3)]
    return (f"  {label}: {each} -> median +{statistics.median(deltas):.2f} ms "
            f"(range +{deltas[0]:.2f} to +{deltas[-1]:.2f}); the slowest 1 % waited "
            f"{split[1]:.2f} ms runnable (CPU), {split[2]:.2f} ms blocked (lock, disk), ran "
            f"{split[0]:.2f} ms")


def bench_throughput(repeats: int = 5) -> None:
    server = ServerProcess(delay=0.1)
    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmp:
        t1, a1, p1, _ = throughput_run(Path(tmp), server, 1, 0, rng)
        eights = [throughput_run(Path(tmp), server, 8, run, rng) for run in range(repeats)]
    server.stop()
    t8 = statistics.median(t for t, _, _, _ in eights)
    print(f"throughput: 500 sessions, 100 ms per call: 1 worker {t1:.1f} s, 8 workers "
          f"{t8:.1f} s (median of {repeats}) -> {t1 / t8:.1f}x faster")
    print(f"writer INSERT p99 (50/s), during vs alone, ms: 1 worker {p1:.2f} vs {a1:.2f}")
    print(p99_line("8 workers", eights))


def profile_requests(window: int, server_window: int, sessions: int = 500
                     ) -> tuple[int, int, int, int]:
    """A first pass over `sessions` sessions; the profile's requests: (calls, input
    tokens, the largest prompt in tokens, requests the server refused)."""
    server = FakeOpenAI(pad=700, context_tokens=server_window).start()
    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        chat = new_file(db)
        for s in range(sessions):
            for i in range(4):
                role = "user" if i % 2 == 0 else "assistant"
                chat.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                             "VALUES (?, ?, ?, ?)", (f"s{s}", role, turn_text(
                                 rng, role, rng.choice(["work", "running", "my sister"])),
                                 (START + timedelta(hours=6 * s, minutes=i)).isoformat()))
        chat.close()
        config = config_for(db, server)
        config = Config(db=config.db, embed=config.embed, completer=CompleterConfig(
            **{**config.completer.__dict__, "context_window": window,
               "max_output_tokens": 600}))
        store = open_store(config)
        completer = OpenAICompleter(config.completer, environ={})
        run_pass(store, config, HashingEmbedder(), completer, trigger="bench", force=True)
        store.close()
    server.stop()
    sizes = [(len(r["body"]["messages"][0]["content"]) + len(r["body"]["messages"][-1]
                                                             ["content"])) // 4
             for r in server.requests if r["path"].endswith("/chat/completions")
             and "Maintain the profile" in r["body"]["messages"][0]["content"]]
    return len(sizes), sum(sizes), max(sizes, default=0), server.refused


def bench_window() -> None:
    """The profile of 500 gists for a model with a 4,096-token window: folded in parts
    that fit vs all at once (which a 4,096-token model refuses), in the same run."""
    whole = profile_requests(window=10_000_000, server_window=0)
    folded = profile_requests(window=4096, server_window=4096)
    print(f"window: profile of 500 gists, 4,096-token model: folded {folded[0]} calls, "
          f"{folded[1]:,} input tokens, largest prompt {folded[2]:,} tokens, "
          f"{folded[3]} refused; all at once 1 call of {whole[1]:,} input tokens, which "
          f"a 4,096-token model refuses ({whole[1] / max(1, folded[1]):.2f}x the folded "
          f"input)")


def bench_acceptance() -> None:
    """The guards on both answer corpora, per check and per job; the off-topic floor
    chosen on one person's conversations and checked on the other's; and the requests a
    pass sends per gist when the server answers as a capable model does."""
    from dreamd.backends.local import LocalEmbedder
    from dreamd.dream.jobs.topic import ON_TOPIC
    from testkit.acceptance import acceptance, held_out, requests_per_gist, table

    embedder = LocalEmbedder()
    checks, jobs = acceptance(embedder)
    print("acceptance, per check (each alone; a facts answer's checks per fact):")
    print("\n".join(f"  {line}" for line in table(checks)))
    print("acceptance, per job (all its checks):")
    print("\n".join(f"  {line}" for line in table(jobs)))
    for held in held_out(embedder):
        print(f"off-topic floor chosen on {held.chosen_on}'s requests (half way between "
              f"good's 2nd and bad's 98th percentile): {held.floor:.2f}; on the other's, "
              f"good kept {held.kept}/{held.good}, bad refused {held.refused}/{held.bad} "
              f"(in use: {ON_TOPIC[embedder.model]})")
    gists, asked = requests_per_gist()
    print(f"sample conversations, the server answering as a capable model: {gists[0]} of "
          f"{gists[1]} gists kept from the model, {asked} summarize requests "
          f"({asked / gists[1]:.2f} a gist)")
    from bench import capable

    if capable.DATA.exists():  # the dev slice: every figure held out, nothing chosen on it
        capable.report()


def main() -> None:
    configure("warning")
    chosen = sys.argv[1:] or ["tokens", "throughput", "window", "acceptance"]
    for name in chosen:
        {"tokens": bench_tokens, "throughput": bench_throughput, "window": bench_window,
         "acceptance": bench_acceptance}[name]()


if __name__ == "__main__":
    main()

"""dreamd benchmarks: each measures dreamd and its baseline side by side in one run.

    python -m bench.run [sensing] [pass] [embed]    (all three by default)

Files are generated under bench/out/ (ignored by git) and reused between runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.generate import generate

if TYPE_CHECKING:
    from dreamd.store.interface import Store

OUT = Path(__file__).parent / "out"

# The prior art's backlog_stats(): one GROUP BY over every exchange.
PRIOR_ART_BACKLOG = """
SELECT SUM(CASE WHEN e.id > COALESCE(su.last_exchange_id, 0) THEN 1 ELSE 0 END),
       (su.session_id IS NULL)
FROM exchanges e LEFT JOIN summaries su ON su.session_id = e.session_id
GROUP BY e.session_id
"""


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `repeat` calls, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def steady_state(db: Path) -> None:
    """Most sessions consolidated, as in a file dreamd has kept up with for months."""
    from dreamd.config import Config
    from dreamd.runtime.log import configure
    from dreamd.store.opening import open_store
    from dreamd.store.tally import sync_tally

    configure("warning")
    store = open_store(Config(db=str(db)))
    started = time.perf_counter()
    sync_tally(store)
    print(f"sensing: first fold of {db.name} into the tally: "
          f"{time.perf_counter() - started:.2f} s (once per file)")
    with store.write() as conn:
        rows = conn.execute("SELECT session_id, last_id, turns, month, user_id "
                            "FROM dreamd_sessions ORDER BY session_id").fetchall()
        for i, (sid, last_id, turns, month, user) in enumerate(rows):
            if i % 20 == 0:
                continue  # 5 % of sessions never summarized
            covered = last_id - (5 if i % 7 == 0 else 0)  # some with new turns
            conn.execute("INSERT INTO summaries (session_id, content, embedding, "
                         "last_exchange_id, created_at, dreamd_seq, dreamd_month, user_id) "
                         "VALUES (?, 'gist', NULL, ?, '2025-07-01', ?, ?, ?)",
                         (sid, covered, i + 1, month, user))
            done = turns - (last_id - covered)
            conn.execute("UPDATE dreamd_sessions SET summarized_id = ?, summarized_turns = ?, "
                         "facts_id = ?, facts_turns = ? WHERE session_id = ?",
                         (covered, done, covered, done, sid))
        conn.execute("INSERT OR REPLACE INTO dreamd_state VALUES ('seq', ?)", (len(rows),))
        top = conn.execute("SELECT MAX(id) FROM exchanges").fetchone()[0]
        # Embedded, indexed and reflected up to the last few hundred turns.
        # (The model "m" under the key scheme's vector space, as sensing reads it.)
        from dreamd.text.keys import space

        conn.execute("INSERT INTO dreamd_embed_state VALUES (?, 384, ?)", (space("m"), top - 300))
        # The words index as far as the vectors (its watermark: see store.pending).
        conn.execute("INSERT OR REPLACE INTO dreamd_state VALUES ('fts_id', ?)", (top - 300,))
        marks = {"dreamd": {"reflected_exchange_id": top - 500, "reflected_seq": len(rows) - 40,
                            "reflected_at": "2025-12-31T00:00:00+00:00"}}
        conn.execute("INSERT INTO self_state VALUES ('assistant', ?, '2025-12-31')",
                     (json.dumps(marks),))
    store.close()


def bench_sensing(users: int = 1) -> None:
    from dreamd.config import Config
    from dreamd.dream.sensing import read_backlog, sync_owners
    from dreamd.store.opening import open_store
    from dreamd.store.tally import sync_tally

    db = OUT / ("sensing-1m.db" if users == 1 else f"sensing-1m-{users}u.db")
    if not db.exists():
        OUT.mkdir(exist_ok=True)
        generate(db, 1_000_000, 20_000, users=users, months=12)
        steady_state(db)
    store = open_store(Config(db=str(db)))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    stats = read_backlog(store, Config(), now, "m")

    def ours() -> None:
        sync_tally(store)
        read_backlog(store, Config(), now, "m")

    conn = sqlite3.connect(db)
    prior_rows = conn.execute(PRIOR_ART_BACKLOG).fetchall()
    dirty_prior = sum(1 for u, _ in prior_rows if u)
    ours_s = timed(ours, 30)
    owners_s = timed(lambda: sync_owners(store, "assistant"), 10)
    prior_s = timed(lambda: conn.execute(PRIOR_ART_BACKLOG).fetchall(), 5)
    conn.close()
    store.close()
    assert stats.dirty == dirty_prior, (stats.dirty, dirty_prior)  # same answer
    print(f"sensing: 1,000,000 turns / 20,000 sessions / {users} users, {stats.dirty} dirty: "
          f"dreamd {ours_s * 1000:.1f} ms vs prior-art GROUP BY {prior_s * 1000:.0f} ms "
          f"-> {prior_s / ours_s:.0f}x faster; with the pass's owner check "
          f"({owners_s * 1000:.2f} ms) {prior_s / (ours_s + owners_s):.0f}x")


def bench_pass() -> None:
    db = OUT / "pass-10k.db"
    OUT.mkdir(exist_ok=True)
    generate(db, 10_000, 200, users=1, months=6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env["DREAMD_LOG__FORMAT"] = "json"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    # This child's own peak, not the largest of every child this process ever waited for.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(err[-2000:])
    rss_mb = usage.ru_maxrss / 1024
    conn = sqlite3.connect(db)
    jobs_json, lock_json = conn.execute(
        "SELECT jobs, write_lock FROM dreamd_runs ORDER BY id DESC LIMIT 1").fetchone()
    jobs = {j["job"]: j for j in json.loads(jobs_json)}
    lock = json.loads(lock_json)
    conn.close()
    embed_s, summ_s = jobs["embed"]["seconds"], jobs["summarize"]["seconds"]
    print(f"pass: 10,000 turns / 200 sessions, embedded default, wall {wall:.1f} s; "
          f"embed {10_000 / embed_s:.0f} turns/s ({embed_s:.1f} s), summarize "
          f"{10_000 / summ_s:.0f} turns/s ({summ_s:.1f} s, {jobs['summarize']['done']} gists), "
          f"facts {jobs['facts']['seconds']:.1f} s ({jobs['facts']['seconds'] / wall:.1%} of the "
          f"pass), "
          f"profile+eras+narrative+reflect "
          f"{sum(jobs[j]['seconds'] for j in ('profile', 'eras', 'narrative', 'reflect')):.2f} s; "
          f"peak RSS {rss_mb:.0f} MB; write lock held {lock['held_ms']:.0f} ms over "
          f"{lock['writes']} writes, longest {lock['longest_ms']:.1f} ms"
          + (f", at most {lock['most_rows']} rows in one" if "most_rows" in lock else ""))


class SlowEmbedder:
    """The hashing embedder at the pace of a remote endpoint: `delay` seconds a call."""

    def __init__(self, delay: float) -> None:
        from dreamd.backends.hashing import HashingEmbedder

        self.inner, self.delay = HashingEmbedder(), delay
        self.dim, self.model = self.inner.dim, self.inner.model

    def embed(self, texts: list[str]) -> np.ndarray:
        time.sleep(self.delay)
        return self.inner.embed(texts)


def live_pass(db: Path, seconds: float, share: float) -> dict[str, dict[str, int]]:
    """One time-limited pass over the backlog while a chat app writes 60 turns/s; each
    job's work done and left."""
    import dataclasses

    from dreamd.config import Config, EmbedConfig, PassConfig
    from dreamd.dream import cycle
    from dreamd.dream.extractive import ExtractiveCompleter
    from dreamd.store.opening import open_store

    stop, report = db.with_suffix(".stop"), db.with_suffix(".writer.json")
    stop.unlink(missing_ok=True)
    writer = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", str(db), "60",
                               str(stop), str(report)])
    config = dataclasses.replace(Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                                 pass_=PassConfig(max_seconds=seconds))
    store = open_store(config)
    embedder = SlowEmbedder(0.05)
    saved, cycle.JOB_SHARE = cycle.JOB_SHARE, share
    try:
        result = cycle.run_pass(store, config, embedder, ExtractiveCompleter(embedder.inner),
                                trigger="bench", force=True)
    finally:
        cycle.JOB_SHARE = saved
        stop.touch()
        writer.wait()
        store.close()
    return {j.job: {"done": j.done, "left": j.remaining} for j in result.jobs}


def bench_live(seconds: float = 30.0) -> None:
    """Issue: a busy app (60 turns/s) and slow embeddings (50 ms a call) starved every
    job after embed. Each job's share of its work done in one pass, with job shares and
    with each job free to take the whole pass, on copies of the same 20,000-turn file."""
    import shutil

    OUT.mkdir(exist_ok=True)
    base = OUT / "live-20k.db"
    generate(base, 20_000, 500, users=1, months=4)
    lines = []
    for label, share in (("job shares", 0.5), ("no shares", 1.0)):
        db = OUT / f"live-{share}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copy(base, db)
        jobs = live_pass(db, seconds, share)
        parts = [f"{name} {v['done']}" + (f"/{v['done'] + v['left']}" if v["left"] else "")
                 for name, v in jobs.items()]
        lines.append(f"live: {label:<10} {seconds:.0f} s pass, 60 turns/s writer, 50 ms "
                     f"embeddings, 20,000-turn backlog: done (/of) " + ", ".join(parts))
    print("\n".join(lines))


def bench_embed() -> None:
    from dreamd.backends.local import LocalEmbedder
    from dreamd.dream.prompts import turn_line

    db = OUT / "pass-10k.db"
    if not db.exists():
        generate(db, 10_000, 200, users=1, months=6)
    conn = sqlite3.connect(db)
    texts = [turn_line(r, c) for r, c in conn.execute(
        "SELECT role, content FROM exchanges ORDER BY id LIMIT 2048")]
    conn.close()
    embedder = LocalEmbedder()
    embedder.embed(texts[:64])  # warm-up

    def bare() -> np.ndarray:
        """Plain onnxruntime: tokenize each batch of 32 in input order, run, mean-pool."""
        out = [embedder.run(embedder.feeds(texts[i : i + 32])) for i in range(0, len(texts), 32)]
        return np.concatenate(out)

    ours_s = timed(lambda: embedder.embed(texts), 3)
    bare_s = timed(bare, 3)
    assert np.allclose(embedder.embed(texts[:32]), bare()[:32], atol=1e-4)
    print(f"embed: {len(texts)} turns, batch 32: dreamd {len(texts) / ours_s:.0f}/s vs bare "
          f"onnxruntime {len(texts) / bare_s:.0f}/s -> {bare_s / ours_s * 100:.0f} % "
          "of bare throughput")


def bench_import() -> None:
    """A 100k-turn JSONL history into a fresh file: turns/s, and a re-import's cost."""
    from dreamd.config import Config
    from dreamd.memory.importers import read_sessions, write_sessions
    from dreamd.store.opening import open_store

    OUT.mkdir(exist_ok=True)
    source, db = OUT / "history-100k.jsonl", OUT / "import.db"
    generated = OUT / "import-source.db"
    generate(generated, 100_000, 2_000, users=1, months=12)
    conn = sqlite3.connect(generated)
    with source.open("w") as fh:
        for sid, role, content, at in conn.execute(
                "SELECT session_id, role, content, created_at FROM exchanges ORDER BY id"):
            fh.write(json.dumps({"session": sid, "role": role, "content": content,
                                 "created_at": at}) + "\n")
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    store = open_store(Config(db=str(db)))
    started = time.perf_counter()
    result = write_sessions(store, read_sessions("jsonl", source))
    first = time.perf_counter() - started
    started = time.perf_counter()
    again = write_sessions(store, read_sessions("jsonl", source))
    second = time.perf_counter() - started
    store.close()
    assert result.turns_added == 100_000 and again.turns_added == 0
    print(f"import: 100,000-turn JSONL ({source.stat().st_size / 1e6:.0f} MB): "
          f"{100_000 / first:,.0f} turns/s ({first:.1f} s); re-import adds 0 in {second:.1f} s")


def with_vectors(db: Path, turns: int, sessions: int, users: int,
                 rng: np.random.Generator) -> None:
    """A generated file whose every turn has a random unit vector of model 'bench', as the
    embed job leaves it."""
    from dreamd.config import Config
    from dreamd.store.opening import open_store
    from dreamd.store.tally import sync_tally

    generate(db, turns, sessions, users=users, months=12)
    store = open_store(Config(db=str(db)))
    sync_tally(store)
    for start in range(1, turns + 1, 20_000):
        block = rng.standard_normal((20_000, 384)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        with store.write() as conn:
            conn.executemany(
                "INSERT INTO dreamd_exchange_vectors (model, exchange_id, vector) "
                "VALUES ('bench', ?, ?)",
                ((start + i, block[i].tobytes()) for i in range(min(20_000, turns - start + 1))))
    with store.write() as conn:
        conn.execute("INSERT INTO dreamd_embed_state VALUES ('bench', 384, ?)", (turns,))
    store.close()


def with_facts_of(store: Store, turns: np.ndarray, rng: np.random.Generator) -> None:
    """One fact for every third turn, each from one turn picked at random, with a random
    unit vector of model 'bench', as the facts and embed jobs leave them (once a file)."""
    from dreamd.ids import DEFAULT_USER
    from dreamd.store.facts import add_fact
    from dreamd.store.vectors import put_vector

    with store.read() as conn:
        if conn.execute("SELECT COUNT(*) FROM facts").fetchone()[0]:
            return
    picked = np.sort(rng.choice(turns, len(turns) // 3, replace=False))
    vectors = rng.standard_normal((len(picked), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with store.write() as conn:
        for turn, vector in zip(picked.tolist(), vectors, strict=True):
            fact = add_fact(conn, DEFAULT_USER, "user", None, f"a fact of turn {turn}", None,
                            "2026-01-01T00:00:00+00:00", [turn], "extractive:bench")
            put_vector(conn, "bench", "fact", str(fact), vector.tobytes())


def bench_recall() -> None:
    """Top-10 over 200k x 384 vectors, warm: the full recipe's vector side (own + context
    + session signal) vs reloading every BLOB per query (the prior art) vs a bare numpy
    matrix-vector product over the same matrix."""
    from dreamd.config import Config
    from dreamd.ids import DEFAULT_USER
    from dreamd.memory.evidence import FactIndex
    from dreamd.memory.recall import VectorIndex, top_k
    from dreamd.store.opening import open_store

    OUT.mkdir(exist_ok=True)
    db = OUT / "recall-200k-k2.db"
    rng = np.random.default_rng(3)
    if not db.exists():
        with_vectors(db, 200_000, 4_000, 1, rng)
    store = open_store(Config(db=str(db)))
    index = VectorIndex(store, "bench")
    index.refresh()
    query = rng.standard_normal(384).astype(np.float32)
    query /= np.linalg.norm(query)

    def ours() -> list[int]:
        index.refresh()
        return index.ids[top_k(index.scores(query), 10)].tolist()

    def prior_art() -> list[int]:
        with store.read() as conn:
            rows = conn.execute("SELECT exchange_id, vector FROM dreamd_exchange_vectors "
                                "WHERE model = 'bench'").fetchall()
        matrix = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
        scores = (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
        return [rows[i][0] for i in np.argsort(scores)[::-1][:10]]

    matrix = index.matrix.copy()
    ids = index.ids.copy()

    def bare() -> list[int]:
        scores = matrix @ query
        return ids[top_k(scores, 10)].tolist()

    # The facts tier as evidence: one fact for every third turn (the shipped sample
    # conversations give 47 facts from 143 turns), each from one turn, stored in the file
    # and read as recall reads them (the index's refresh, then the product).
    with_facts_of(store, ids, rng)
    fact_index = FactIndex(store, "bench", DEFAULT_USER)
    fact_index.refresh()

    def with_facts(every_share: bool = False) -> list[int]:
        # As recall takes them: a fact's share only where it could move a turn into the
        # ten (or every turn's share, to check that the two agree).
        index.refresh()
        facts = fact_index.evidence(query)
        ranked: list[tuple[np.ndarray | None, int]] | None = \
            None if every_share else [(None, 10)]
        return index.ids[top_k(index.scores(query, None, facts, ranked), 10)].tolist()

    assert bare() == prior_art()  # the same matrix
    assert with_facts() == with_facts(every_share=True)  # the shares left out move nothing
    prior_s = timed(prior_art, 3)
    # The three in turn, ten queries each, five rounds: each ratio is taken within a
    # round (a busy machine's memory bandwidth drifts between rounds), then the median.
    rounds = [(timed(ours, 10), timed(bare, 10), timed(with_facts, 10)) for _ in range(5)]
    ours_s, bare_s, facts_s = (statistics.median(r[i] for r in rounds) for i in range(3))
    turns_x = statistics.median(o / b for o, b, _ in rounds)
    facts_x = statistics.median(f / b for _, b, f in rounds)
    store.close()
    print(f"recall: top-10 over {len(index.ids):,} x 384, warm, full recipe: dreamd "
          f"{ours_s * 1000:.1f} ms vs reloading BLOBs {prior_s * 1000:.0f} ms -> "
          f"{prior_s / ours_s:.0f}x faster; bare numpy mat-vec {bare_s * 1000:.1f} ms -> "
          f"{turns_x:.2f}x of bare")
    print(f"recall: the same with {len(fact_index.matrix):,} facts as evidence for their turns: "
          f"{facts_s * 1000:.1f} ms -> {facts_x:.2f}x of the bare mat-vec over the "
          f"turns alone")


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM): unlike ru_maxrss, it starts again at exec,
    so a child does not report the memory of the parent it was forked from."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_recall_users() -> None:
    """One user's query in a 1M-turn file of 500 users, in a fresh process: the user's
    own matrix only (load, warm query) and the process's peak RSS."""
    from dreamd.config import Config
    from dreamd.memory.recall import Owners, VectorIndex, top_k
    from dreamd.store.opening import open_store

    OUT.mkdir(exist_ok=True)
    db = OUT / "recall-1m-500u.db"
    rng = np.random.default_rng(5)
    if not db.exists():
        with_vectors(db, 1_000_000, 20_000, 500, rng)
    if os.environ.get("BENCH_FRESH_PROCESS") != "1":  # measure RSS in a process of its own
        subprocess.run([sys.executable, "-m", "bench.run", "recall-users"], check=True,
                       env={**os.environ, "BENCH_FRESH_PROCESS": "1"})
        return
    before = peak_rss_mb()
    store = open_store(Config(db=str(db)))
    index = VectorIndex(store, "bench", Owners(("u7",)))
    started = time.perf_counter()
    index.refresh()
    load = time.perf_counter() - started
    query = rng.standard_normal(384).astype(np.float32)

    def one() -> list[int]:
        index.refresh()
        return index.ids[top_k(index.scores(query), 10)].tolist()

    warm = timed(one, 50)
    peak = peak_rss_mb()
    store.close()
    print(f"recall, 1,000,000 turns / 500 users: one user's {len(index.ids):,} turns loaded "
          f"in {load * 1000:.0f} ms, warm query {warm * 1000:.2f} ms; process peak RSS "
          f"{peak:.0f} MB ({before:.0f} MB before opening the file; all "
          f"users' vectors would be {1_000_000 * 384 * 4 / 2**20:.0f} MB)")


def bench_forget() -> None:
    """How long forget holds the write lock, for one user of twenty in a 200k-turn file
    with vectors and full-text rows: each of its write transactions."""
    from dreamd.config import Config
    from dreamd.dream.jobs.embed import INDEX_CHUNK, words_rows
    from dreamd.memory.forget import STEP, Scope, forget
    from dreamd.runtime.log import configure
    from dreamd.store.opening import open_store
    from dreamd.store.pending import settle_words_watermark
    from dreamd.store.sqlite.store import MERGE_PAGES, WriteLockTimes
    from dreamd.store.state import to_blob
    from dreamd.store.tally import sync_tally
    from dreamd.store.turns import max_exchange_id
    from dreamd.store.vectors import ids_after, index_texts, with_neighbours

    class EachHold(WriteLockTimes):
        def __init__(self) -> None:
            super().__init__()
            self.each: list[float] = []

        def add(self, seconds: float, rows: int = 0) -> None:
            super().add(seconds, rows)
            self.each.append(seconds)

    configure("warning")
    db = OUT / "forget-200k.db"
    OUT.mkdir(exist_ok=True)
    generate(db, 200_000, 4_000, users=20, months=12)
    store = open_store(Config(db=str(db)))
    sync_tally(store)
    vector = to_blob(np.ones(384, dtype=np.float32))
    with store.write() as conn:
        top = max_exchange_id(conn)
        conn.executemany("INSERT INTO dreamd_exchange_vectors VALUES ('m', ?, ?)",
                         ((i, vector) for i in range(1, top + 1)))
    for after in range(0, top, INDEX_CHUNK):  # as the embed job builds it: the index's
        with store.read() as conn:            # segments then have the shape a pass leaves
            turns = with_neighbours(conn, ids_after(conn, after, INDEX_CHUNK, top))
        with store.write() as conn:
            index_texts(conn, words_rows(turns))
            settle_words_watermark(conn, turns[-1][0].id)
    store.purge_log()
    holds = store.lock_times = EachHold()
    started = time.perf_counter()
    report = forget(store, Scope("u7"), "assistant")
    wall = time.perf_counter() - started
    store.close()
    print(f"forget: {report.turns:,} turns of 1 of 20 users in a 200,000-turn file, "
          f"{wall:.2f} s in all, in {len(holds.each)} write transactions (drop what was "
          f"derived; delete up to {STEP} turns each; merge the index {MERGE_PAGES} pages "
          f"each): median {statistics.median(holds.each) * 1000:.0f} ms, longest "
          f"{max(holds.each) * 1000:.0f} ms; WAL emptied: {report.wal_truncated}")


def main() -> None:
    chosen = sys.argv[1:] or ["sensing", "sensing-users", "pass", "embed", "import", "recall",
                              "recall-users", "forget", "live"]
    for name in chosen:
        {"sensing": bench_sensing, "sensing-users": lambda: bench_sensing(500),
         "pass": bench_pass, "embed": bench_embed, "import": bench_import,
         "recall": bench_recall, "recall-users": bench_recall_users, "forget": bench_forget,
         "live": bench_live}[name]()


if __name__ == "__main__":
    main()

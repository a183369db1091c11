"""One pass end to end on real files, with a Completer that refuses open transactions."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dreamd.cli.demo import sample_sessions, write_sessions
from dreamd.config import (
    Config,
    EmbedConfig,
    FactsConfig,
    JobsConfig,
    PassConfig,
    SummarizeConfig,
)
from dreamd.dream.cycle import run_pass
from dreamd.models import Completion, Prompt
from dreamd.store.interface import Conn
from dreamd.store.interface import Store as AnyStore
from dreamd.store.opening import open_store
from dreamd.store.runs import recent_runs
from dreamd.store.sqlite.store import SqliteStore as Store
from dreamd.text.keys import space
from tests.engines import App
from tests.helpers import (
    T0,
    RecordingCompleter,
    add_turns,
    big_file,
    chat_texts,
    config_for,
    derived_digest,
    make_chat_file,
    open_sqlite,
)

LATER = datetime(2026, 12, 1, tzinfo=UTC)


def pass_(store: AnyStore, completer: RecordingCompleter, config=None, force=True, clock=None):
    config = config or config_for(store.path)  # type: ignore[attr-defined]
    return run_pass(store, config, completer.embedder, completer, trigger="test", force=force,
                    clock=clock or (lambda: LATER))


@pytest.fixture
def demo_store(db: Path):
    conn = make_chat_file(db)
    write_sessions(conn, sample_sessions())
    conn.close()
    store = open_sqlite(config_for(db))
    yield store
    store.close()


def last_turns(conn: Conn) -> dict[str, int]:
    return dict(conn.execute("SELECT session_id, MAX(id) FROM exchanges GROUP BY session_id"))


def test_force_pass_builds_every_tier(demo_store: Store) -> None:
    completer = RecordingCompleter(demo_store)
    result = pass_(demo_store, completer)
    assert result.outcome == "ok" and not result.failed
    conn = demo_store.conn
    gists = dict(conn.execute("SELECT session_id, last_exchange_id FROM summaries"))
    assert gists == last_turns(conn)  # every gist covers its session's last turn
    assert conn.execute("SELECT content FROM profile WHERE id = 'self'").fetchone()
    months = [r[0] for r in conn.execute("SELECT month FROM eras ORDER BY month")]
    assert months == ["2026-07", "2026-08", "2026-09", "2026-10"]
    assert conn.execute("SELECT content FROM narrative WHERE id = 'current'").fetchone()
    state = conn.execute("SELECT data FROM self_state WHERE id = 'assistant'").fetchone()[0]
    assert '"self_narrative"' in state and '"drives"' in state
    sources = {r[0] for r in conn.execute("SELECT dreamd_source FROM summaries")}
    assert all(s.startswith("extractive:") for s in sources)
    run = conn.execute("SELECT outcome, jobs, drives_before, drives_after FROM dreamd_runs")
    outcome, jobs, before, after = run.fetchone()
    assert outcome == "ok" and '"summarize"' in jobs and before and after
    assert result.drives_after.stability == 1.0 and result.drives_before.continuity > 0.3


def test_second_pass_writes_nothing_and_calls_no_backend(demo_store: Store) -> None:
    completer = RecordingCompleter(demo_store)
    pass_(demo_store, completer)
    digest = derived_digest(demo_store.path)
    calls, embeds = len(completer.prompts), completer.embedder.calls
    result = pass_(demo_store, completer)
    assert len(completer.prompts) == calls and completer.embedder.calls == embeds
    assert derived_digest(demo_store.path) == digest
    assert all(not j.ran for j in result.jobs)
    assert all(j.reason.startswith("nothing to do") for j in result.jobs)


def test_new_turns_are_summarized_incrementally(demo_store: Store) -> None:
    """The second gist sees the previous gist plus only the new turns."""
    completer = RecordingCompleter(demo_store)
    pass_(demo_store, completer)
    conn = sqlite3.connect(demo_store.path, isolation_level=None)
    new = ["I adopted a second dog called Crumble today!", "Two dogs now, how exciting."]
    ids = add_turns(conn, "s12", new, start=datetime(2026, 10, 28, tzinfo=UTC))
    conn.close()
    completer.prompts.clear()
    pass_(demo_store, completer)
    summary = [p for p in completer.prompts if p.task == "summarize"]
    assert len(summary) == 1
    assert "Previous gist" in summary[0].user
    # The previous gist (told in the third person) and only the new turns.
    assert "Crumble" in summary[0].user and "moved into the new flat" in summary[0].user.lower()
    # Only the two new turns were sent as new turns.
    new_part = summary[0].user.split("New turns:")[1]
    assert new_part.count("\nuser:") + new_part.count("\nassistant:") == 2
    row = demo_store.conn.execute(
        "SELECT last_exchange_id FROM summaries WHERE session_id='s12'").fetchone()
    assert row[0] == ids[-1]


def test_long_first_summary_is_chunked_and_merged(db: Path) -> None:
    conn = make_chat_file(db)
    texts = chat_texts(0, 50)
    texts[47] = "The very end: I finally booked the flight to Osaka for April."
    add_turns(conn, "long", texts)
    conn.close()
    config = config_for(db, summarize=SummarizeConfig(chunk_turns=12, gist_lines=4))
    store = open_sqlite(config)
    completer = RecordingCompleter(store)
    result = pass_(store, completer, config)
    assert not result.failed
    tasks = [p.task for p in completer.prompts if p.task in ("summarize", "merge")]
    assert tasks == ["summarize"] * 5 + ["merge"]
    merged = completer.prompts[tasks.index("merge")]
    # The merge saw material from the last chunk: nothing was silently dropped.
    assert "Turn 48" in merged.user or "Osaka" in merged.user
    assert store.conn.execute("SELECT last_exchange_id FROM summaries").fetchone()[0] == 50
    store.close()


def test_idle_gating_waits_for_a_quiet_chat(db: Path) -> None:
    conn = make_chat_file(db)
    start = LATER - timedelta(minutes=5)
    add_turns(conn, "live", chat_texts(1, 30), start=start - timedelta(minutes=30))
    add_turns(conn, "quiet", chat_texts(2, 30), start=start - timedelta(hours=5))
    conn.close()
    store = open_sqlite(config_for(db))
    completer = RecordingCompleter(store)
    result = pass_(store, completer, force=False, clock=lambda: start + timedelta(minutes=1))
    summarized = {r[0] for r in store.conn.execute("SELECT session_id FROM summaries")}
    assert summarized == {"quiet"}
    job = next(j for j in result.jobs if j.job == "summarize")
    assert job.ran and job.done == 1
    later = pass_(store, completer, force=False, clock=lambda: start + timedelta(hours=2))
    assert {r[0] for r in store.conn.execute("SELECT session_id FROM summaries")} == {
        "quiet", "live"}
    assert later.outcome == "ok"
    store.close()


def test_a_pass_records_how_long_it_held_the_write_lock(demo_store: Store) -> None:
    result = pass_(demo_store, RecordingCompleter(demo_store))
    gists = demo_store.conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0]
    lock = result.write_lock
    assert lock["writes"] > gists  # one write per saved gist, and more
    assert lock["held_ms"] >= lock["longest_ms"] > 0
    assert recent_runs(demo_store.conn, 1)[0]["write_lock"] == lock
    # A write kept open is counted in full, a rolled-back one too.
    with demo_store.write():
        time.sleep(0.05)
    with pytest.raises(RuntimeError), demo_store.write():
        raise RuntimeError("save failed")
    assert demo_store.lock_times.longest >= 0.05
    assert demo_store.lock_times.writes == lock["writes"] + 1 + 2  # finish_run, then ours


def test_a_pass_writes_in_transactions_of_bounded_size_whatever_the_backlog(
        tmp_path: Path) -> None:
    """Every write of a pass is short however much waits: the tally folds new turns in
    chunks, the words index and the embeddings go in batches. (4,000 new sessions used to
    be folded into the tally by one write of 4,001 rows.)"""
    most = {}
    for sessions in (200, 4000):
        db = tmp_path / f"{sessions}.db"
        big_file(db, sessions, 2)
        store = open_sqlite(config_for(db, pass_=PassConfig(max_items=5)))
        try:
            result = pass_(store, RecordingCompleter(store), config_for(
                db, pass_=PassConfig(max_items=5)))
        finally:
            store.close()
        most[sessions] = result.write_lock["most_rows"]
    assert 0 < most[200] <= most[4000] <= 2500, most  # 20 times the backlog, still short


def test_the_words_index_is_written_a_few_hundred_rows_at_a_time(tmp_path: Path) -> None:
    """The full-text index of 6,000 new turns goes in chunks short enough that the chat
    app, finding the lock taken, gets it at its busy handler's first or second retry
    (SQLite sleeps 1, 2, 5, 10 ms between tries), and its parts are merged in writes of
    their own. Chunks of 500 turns (with their neighbours' text again) wrote 1,776 rows
    at once here, 4-9 ms of lock on a slow box; with chunks of 128, FTS5's own merging,
    inside the insert that adds a part, still made writes of 622 rows (20-25 ms there)."""
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.dream.jobs import embed
    from dreamd.dream.jobs.base import JobContext
    from dreamd.dream.jobs.budget import Budget
    from dreamd.store.tally import sync_tally

    db = tmp_path / "m.db"
    big_file(db, 150, 40)
    config = config_for(db)
    store = open_sqlite(config)
    try:  # the embed job alone, as a pass runs it: it writes the index
        sync_tally(store)
        result = embed.run(JobContext.for_pass(store, config, HashingEmbedder(),
                                               RecordingCompleter(store), Budget(),
                                               epoch="0"), "test")  # a new file's vector epoch
        automerge = store.conn.execute(
            "SELECT v FROM dreamd_fts_config WHERE k = 'automerge'").fetchone()
        indexed = store.conn.execute("SELECT COUNT(*) FROM dreamd_fts").fetchone()[0]
    finally:
        store.close()
    assert result.done == 6000 and not result.errors, result
    assert 0 < store.lock_times.most_rows <= 500, store.lock_times.as_dict()
    assert automerge is not None and str(automerge[0]) == "0" and indexed == 6000


def test_long_turns_go_into_the_words_index_fewer_at_a_time(tmp_path: Path) -> None:
    """Turns of 200 words: a chunk of 128 of them, with their neighbours' words, was half
    a megabyte of text in one write (547 rows, 14 ms here). A write now takes at most
    INDEX_CHARS of text (219 rows, 8 ms)."""
    import random

    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.dream.jobs import embed
    from dreamd.dream.jobs.base import JobContext
    from dreamd.dream.jobs.budget import Budget
    from dreamd.store.tally import sync_tally

    db = tmp_path / "m.db"
    app = make_chat_file(db)
    rng = random.Random(5)
    words = [f"word{i}" for i in range(5000)]
    for s in range(10):
        add_turns(app, f"s{s}", [" ".join(rng.choice(words) for _ in range(200))
                                 for _ in range(40)])
    app.close()
    config = config_for(db)
    store = open_sqlite(config)
    try:
        sync_tally(store)
        result = embed.run(JobContext.for_pass(store, config, HashingEmbedder(),
                                               RecordingCompleter(store), Budget(),
                                               epoch="0"), "test")  # a new file's vector epoch
        indexed = store.conn.execute("SELECT COUNT(*) FROM dreamd_fts").fetchone()[0]
    finally:
        store.close()
    assert result.done == 400 and indexed == 400, result
    assert store.lock_times.most_rows <= 400, store.lock_times.as_dict()


def test_every_stored_tier_is_bounded_whatever_the_input(db: Path) -> None:
    """A 1 MB turn (one endless sentence, then one endless word) cannot make a 1 MB
    gist, era, profile or narrative."""
    from dreamd.dream.jobs.registry import JOBS

    bound = {task: chars for job in JOBS for task, chars in job.bounds.items()}

    conn = make_chat_file(db)
    huge = "I keep talking about my garden and " * 30_000 + "x" * 100_000
    add_turns(conn, "big", [huge, "Tell me more.", huge + " and again.", "Sure."])
    conn.close()
    store = open_sqlite(config_for(db))
    result = pass_(store, RecordingCompleter(store))
    assert result.outcome == "ok", result.jobs
    sizes = {table: store.conn.execute(f"SELECT MAX(LENGTH(content)) FROM {table}").fetchone()[0]
             for table in ("summaries", "profile", "eras", "narrative")}
    state = store.conn.execute("SELECT MAX(LENGTH(data)) FROM self_state").fetchone()[0]
    store.close()
    assert all(sizes.values()), sizes
    # eras and the narrative carry a one-line header ("2026-03: 1 conversations.",
    # "Recent arc (2026-03 to 2026-03):") above the bounded digest
    assert sizes["summaries"] <= bound["summarize"]
    assert sizes["eras"] <= bound["era"] + 64
    assert sizes["profile"] <= bound["profile"]
    assert sizes["narrative"] <= bound["narrative"] + 64
    assert state <= 20_000


def test_a_new_job_is_one_spec_registered_and_its_drive_schedules_it(demo_store: Store) -> None:
    """A job declared by its spec alone (name, drive, work, runner) runs in the pass when
    its drive passes its threshold, and not when it does not."""
    from dreamd.dream.jobs.registry import JOBS
    from dreamd.models import JobResult, JobSpec

    calls: list[str] = []

    def work(stats, force, config):
        return (stats.gists_newer_than_profile > 0,
                f"{stats.gists_newer_than_profile} new gists to count")

    def run(ctx, reason):
        calls.append(reason)
        return JobResult("count", True, reason, done=1)

    jobs = JOBS.with_job(JobSpec(name="count", drive="coherence", work=work, run=run),
                         after="summarize")  # new gists raise coherence just before it
    assert jobs.names == ("embed", "facts", "summarize", "count", "profile", "eras", "narrative",
                          "reflect")
    completer = RecordingCompleter(demo_store)
    config = config_for(demo_store.path)
    first = run_pass(demo_store, config, completer.embedder, completer, trigger="test",
                     clock=lambda: LATER, jobs=jobs)
    ran = {r.job: r for r in first.jobs}
    assert ran["count"].ran and calls and calls[0].startswith("coherence ")
    second = run_pass(demo_store, config, completer.embedder, completer, trigger="test",
                      clock=lambda: LATER, jobs=jobs)
    # memory is caught up: coherence is below its threshold, so the job waits
    assert not {r.job: r for r in second.jobs}["count"].ran and len(calls) == 1


def test_the_pass_log_names_every_job_that_ran_and_counts_read_as_words(db: Path) -> None:
    """pass_finished lists the jobs that ran (status lists the same), and those that
    stored something; an era of one session says "1 conversation"."""
    from structlog.testing import capture_logs

    from dreamd.runtime.log import configure, get_logger

    conn = make_chat_file(db)
    add_turns(conn, "only", chat_texts(0, 6))
    conn.close()
    store = open_sqlite(config_for(db))
    configure("info")
    completer = RecordingCompleter(store)
    with capture_logs() as logs:
        result = run_pass(store, config_for(db), completer.embedder, completer,
                          trigger="test", force=True, clock=lambda: LATER, log=get_logger())
    era = store.conn.execute("SELECT content FROM eras").fetchone()[0]
    store.close()
    assert era.startswith("2026-03: 1 conversation.\n")
    [finished] = [e for e in logs if e["event"] == "pass_finished"]
    assert finished["ran"] == [r.job for r in result.jobs if r.ran] == [
        "embed", "facts", "summarize", "profile", "eras", "narrative", "reflect"]
    assert finished["stored"] == [r.job for r in result.jobs if r.done]


# The store's part of a pass, on both engines (`target`: a SQLite file, a PostgreSQL
# database): the chat app writes through its own connection (tests.engines.App).

@contextlib.contextmanager
def on_engine(target: str, *, sample: bool = False,
              **sections: Any) -> Iterator[tuple[AnyStore, App, Config]]:
    """The app's tables (and the sample sessions), dreamd's store on them, the config."""
    app = App(target)
    app.create_tables()
    config = dataclasses.replace(Config(db=target, embed=EmbedConfig(backend="hashing")),
                                 **sections)
    for session in sample_sessions() if sample else ():
        app.say(session.session_id, [(r, c) for r, c, _ in session.turns],
                [at for _, _, at in session.turns])
    store = open_store(config)
    try:
        store.settle_turns(wait=5.0)
        yield store, app, config
    finally:
        store.close()
        app.close()


def test_failures_back_off_then_quarantine_and_the_pass_goes_on(target: str) -> None:
    jobs = JobsConfig(max_attempts=2, backoff_seconds=60)
    with on_engine(target, jobs=jobs) as (store, app, config):
        app.turns("good", chat_texts(0, 6), T0)
        app.turns("bad", ["POISON turn that the backend refuses", "reply"] * 3, T0)
        store.settle_turns(wait=5.0)
        completer = RecordingCompleter(store, fail_on={"POISON"})
        clock = [LATER]
        result = pass_(store, completer, config, force=False, clock=lambda: clock[0])
        job = next(j for j in result.jobs if j.job == "summarize")
        assert (job.done, job.failed) == (1, 1) and result.outcome == "failed"
        assert app.rows("SELECT session_id FROM summaries") == [("good",)]
        assert next(j for j in result.jobs if j.job == "eras").done == 1  # the pass went on
        failure = "SELECT attempts, quarantined FROM dreamd_failures WHERE job = 'summarize'"
        assert app.rows(failure) == [(1, 0)]
        # Within the backoff window the item is not retried ...
        calls = len(completer.prompts)
        pass_(store, completer, config, force=False,
              clock=lambda: clock[0] + timedelta(seconds=30))
        assert not [p for p in completer.prompts[calls:] if "POISON" in p.user]
        # ... after it, it is, and the second failure quarantines it.
        clock[0] = LATER + timedelta(minutes=5)
        pass_(store, completer, config, force=False, clock=lambda: clock[0])
        assert app.rows(failure) == [(2, 1)]
        # Quarantined items are not retried, even forced; nothing was written for them.
        calls = len(completer.prompts)
        pass_(store, completer, config, force=True, clock=lambda: clock[0] + timedelta(days=1))
        assert not [p for p in completer.prompts[calls:] if "POISON" in p.user]
        assert app.value("SELECT COUNT(*) FROM summaries WHERE session_id = 'bad'") == 0


def test_a_stale_write_is_discarded_not_stored_over_newer_state(target: str) -> None:
    """If the gist moved while the backend was thinking, the older answer is dropped."""
    with on_engine(target) as (store, app, config):
        app.turns("s", chat_texts(0, 6), T0)
        store.settle_turns(wait=5.0)

        class Racing(RecordingCompleter):
            def complete(self, prompt: Prompt) -> Completion:
                if prompt.task == "summarize" and not getattr(self, "raced", False):
                    self.raced = True
                    app.execute("UPDATE dreamd_sessions SET summarized_id = 99")  # elsewhere
                return super().complete(prompt)

        result = pass_(store, Racing(store), config)
        job = next(j for j in result.jobs if j.job == "summarize")
        assert (job.done, job.skipped) == (0, 1)
        assert app.value("SELECT COUNT(*) FROM summaries") == 0


def test_pass_budget_leaves_the_rest_for_the_next_pass(target: str) -> None:
    budget = PassConfig(max_seconds=0, max_items=3)
    with on_engine(target, pass_=budget) as (store, app, config):
        for i in range(6):
            app.turns(f"s{i}", chat_texts(i, 4), LATER - timedelta(days=30 - i))
        store.settle_turns(wait=5.0)
        completer = RecordingCompleter(store)
        first = pass_(store, completer, config)
        assert first.outcome == "partial"
        assert app.value("SELECT COUNT(*) FROM summaries") < 6
        for _ in range(10):
            if pass_(store, completer, config).outcome == "ok":
                break
        assert app.value("SELECT COUNT(*) FROM summaries") == 6


def words_held(app: App) -> int:
    return int(app.value("SELECT COUNT(*) FROM exchanges e WHERE EXISTS "
                         f"(SELECT 1 FROM dreamd_fts f WHERE f.{'id' if app.pg else 'rowid'} "
                         "= e.id)"))


def test_turns_with_a_vector_and_no_words_are_indexed_by_the_next_pass(target: str) -> None:
    """A pass that ends between a batch's vectors and their words (its budget spent here;
    a crash, a stop or the server going away do the same) leaves turns that have a vector
    and no entry in the words index. The next pass indexes them: it does not wait for
    turns without a vector to make the embed job due."""
    budget = PassConfig(max_seconds=0, max_items=1)
    embed = EmbedConfig(backend="hashing", batch_size=256)
    with on_engine(target, pass_=budget, embed=embed) as (store, app, config):
        for i in range(3):
            app.turns(f"s{i}", chat_texts(i, 6), LATER - timedelta(days=30 - i))
        store.settle_turns(wait=5.0)
        completer = RecordingCompleter(store)
        pass_(store, completer, config, force=False)
        assert app.value("SELECT COUNT(*) FROM dreamd_exchange_vectors") == 18
        assert words_held(app) == 0  # the one batch spent the pass's budget
        for _ in range(10):
            if pass_(store, completer, config, force=False).outcome == "ok":
                break
        assert words_held(app) == 18


def test_drives_persist_between_passes(target: str) -> None:
    from dreamd.dream.cycle import read_drives

    with on_engine(target, sample=True) as (store, _app, config):
        result = pass_(store, RecordingCompleter(store), config, force=False)
        assert read_drives(store, "assistant") == dataclasses.replace(
            result.drives_after,
            **{k: round(v, 3) for k, v in result.drives_after.as_dict().items()},
        )


def test_a_new_embedding_model_re_embeds_without_mixing_dimensions(target: str) -> None:
    """Vectors are kept per model; switching models fills the new one in the background."""
    from dreamd.backends.hashing import HashingEmbedder

    with on_engine(target, sample=True) as (store, app, config):
        pass_(store, RecordingCompleter(store), config)
        pass_(store, RecordingCompleter(store, embedder=HashingEmbedder(dim=64)), config)
        facts = app.value("SELECT COUNT(*) FROM facts")
        assert facts > 10
        for table, count in (("dreamd_exchange_vectors", 143),
                             ("dreamd_vectors", 12 + 4 + facts)):
            rows = dict(app.rows(f"SELECT model, COUNT(*) FROM {table} GROUP BY model"))
            assert rows == {space("hashing-256"): count, space("hashing-64"): count}, table
            dims = dict(app.rows(
                f"SELECT model, MAX(length(vector)) FROM {table} GROUP BY model "
                f"HAVING MIN(length(vector)) = MAX(length(vector))"))
            assert dims == {space("hashing-256"): 256 * 4, space("hashing-64"): 64 * 4}, table


@dataclasses.dataclass
class WeakModel:
    """A Completer standing in for an LLM: a short grounded answer, or a chat template's
    marker for a summary of turns holding POISON while `junk` is set."""

    junk: bool = True
    name: str = "openai"
    model: str = "weak"
    junk_tasks: tuple[str, ...] = ()  # tasks answered with junk whatever the prompt holds

    def complete(self, prompt: Prompt) -> Completion:
        if prompt.task in self.junk_tasks or (
                self.junk and prompt.task == "summarize" and "POISON" in prompt.user):
            return Completion("<<SYS>>", "openai", self.model)
        if prompt.task == "reflect":
            text = ('{"mood": "calm", "mood_score": 0.1, "energy": 0.5, "self_narrative": '
                    '"I listened.", "reflection": "A quiet day.", "topics": []}')
        else:
            text = f"- the conversation went on: {prompt.items[-1][:60]}"
        return Completion(text, "openai", self.model)


def test_the_fallback_marks_what_it_built_and_the_model_redoes_it_later(target: str) -> None:
    """Both engines: a session whose answers are junk twice gets the extractive gist,
    marked and counted; once the model answers again, the next pass replaces it."""
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.store.fallback import fallback_counts

    jobs, facts = JobsConfig(fallback_retry_hours=0), FactsConfig(producer="offline")
    with on_engine(target, jobs=jobs, facts=facts) as (store, app, config):
        app.turns("good", chat_texts(0, 6), T0)
        app.turns("bad", ["POISON in every turn of this session", "a reply"] * 3, T0)
        store.settle_turns(wait=5.0)
        model = WeakModel()
        run_pass(store, config, HashingEmbedder(), model, trigger="test", force=True)
        made = dict(app.rows("SELECT session_id, dreamd_source FROM summaries"))
        with store.read() as conn:
            counted = fallback_counts(conn)
        model.junk = False
        run_pass(store, config, HashingEmbedder(), model, trigger="test", force=True)
        again = dict(app.rows("SELECT session_id, dreamd_source FROM summaries"))
        with store.read() as conn:
            left = fallback_counts(conn)
    assert made == {"good": "llm:weak", "bad": "fallback:weak"}
    assert counted == {"gist": 1}
    assert again == {"good": "llm:weak", "bad": "llm:weak"} and left == {}


def test_the_fallback_builds_what_the_offline_default_builds(db: Path) -> None:
    """A profile, eras and narrative the model fails twice are made as the offline default
    makes them (from the facts), not by selecting lines from the gists."""
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.ids import profile_id
    from dreamd.store.facts import facts_of
    from dreamd.store.tiers import profile_row
    from dreamd.text.from_facts import profile_from

    app = make_chat_file(db)
    write_sessions(app, sample_sessions())
    app.close()
    config = dataclasses.replace(config_for(db), facts=FactsConfig(producer="offline"))
    store = open_sqlite(config)
    model = WeakModel(junk=False, junk_tasks=("profile", "era", "narrative"))
    run_pass(store, config, HashingEmbedder(), model, trigger="test", force=True)
    with store.read() as conn:
        profile = profile_row(conn, profile_id("default"))
        facts = facts_of(conn, "default", current_only=True)
        sources = {r[0] for r in conn.execute(
            "SELECT dreamd_source FROM eras UNION SELECT dreamd_source FROM narrative")}
    store.close()
    assert profile is not None and profile.source == "fallback:weak"
    assert profile.content == profile_from(facts, config.profile.max_facts,
                                           listeners=(config.agent.name,))
    assert sources == {"fallback:weak"}

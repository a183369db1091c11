"""The openai backend against a real HTTP server on 127.0.0.1 that can be told to fail."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import Breaker, OpenAICompleter, api_key
from dreamd.config import BudgetConfig, CompleterConfig, Config, FactsConfig, JobsConfig
from dreamd.dream.cycle import run_pass
from dreamd.errors import (
    BackendMisconfigured,
    BackendUnavailable,
    BreakerOpen,
    InputRejected,
    OutputInvalid,
)
from dreamd.runtime.log import get_logger
from dreamd.store.sqlite.store import SqliteStore as Store
from dreamd.text.keys import space
from testkit.openai_server import FakeOpenAI
from tests.helpers import (
    KEY,
    PROMPT,
    add_turns,
    chat_texts,
    completer,
    completer_config,
    config_for,
    derived_digest,
    make_chat_file,
    open_sqlite,
)

ROOT = Path(__file__).parent.parent


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.mark.parametrize(
    ("plan", "outcome", "at_least", "at_most"),
    [
        (["429:1", "ok"], "ok", 0.95, 3.0),  # Retry-After honoured
        (["429:300"], BackendUnavailable, 0.0, 1.0),  # over the cap: defer, don't wait
        (["500", "ok"], "ok", 0.0, 2.0),
        (["503", "503", "ok"], "ok", 0.0, 4.0),
        (["400"], InputRejected, 0.0, 0.5),  # not retried as is
        (["401"], BackendMisconfigured, 0.0, 0.5),
        (["404"], BackendMisconfigured, 0.0, 0.5),
        (["hang:3", "ok"], "ok", 0.5, 3.0),  # read timeout, then a retry
        (["malformed", "ok"], "ok", 0.0, 2.0),
        (["empty"], OutputInvalid, 0.0, 0.5),
        (["500", "500", "500", "500"], BackendUnavailable, 0.0, 4.5),
    ],
)
def test_each_failure_ends_in_its_class_within_the_deadline(
    server: FakeOpenAI, plan: list[str], outcome: object, at_least: float, at_most: float
) -> None:
    server.plan(*plan)
    with completer(server) as client:
        started = time.monotonic()
        if outcome == "ok":
            result = client.complete(PROMPT)
            assert result.text.startswith("- SUMMARIZE")  # <think> and preamble stripped
        else:
            with pytest.raises(outcome):  # type: ignore[call-overload]
                client.complete(PROMPT)
    assert at_least <= time.monotonic() - started <= at_most


def test_hang_past_every_timeout_is_bounded_by_the_call_deadline(server: FakeOpenAI) -> None:
    server.plan(*["hang:5"] * 10)
    with completer(server, call_deadline_seconds=1.6, retries=10) as client:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            client.complete(PROMPT)
    assert time.monotonic() - started < 4  # one 5 s hang alone would be more


def test_missing_usage_is_estimated(server: FakeOpenAI) -> None:
    server.plan("nousage")
    with completer(server) as client:
        result = client.complete(PROMPT)
    assert result.tokens_in > 0 and result.tokens_out > 0


def test_breaker_opens_after_consecutive_failures_and_closes_after_cooldown(
    server: FakeOpenAI,
) -> None:
    with completer(server, retries=0, breaker_failures=3,
                   breaker_cooldown_seconds=1.0) as client:
        now = [0.0]
        client.breaker.clock = lambda: now[0]  # the cool-down passes when the test says
        server.plan("500", "500", "500")
        for _ in range(3):
            with pytest.raises(BackendUnavailable):
                client.complete(PROMPT)
        assert client.breaker.state == "open"
        calls = len(server.requests)
        with pytest.raises(BreakerOpen):
            client.complete(PROMPT)
        assert len(server.requests) == calls  # no call while open
        now[0] += 1.05
        assert client.breaker.state == "half-open"
        assert client.complete(PROMPT).text
        assert client.breaker.state == "closed"


def test_breaker_state_machine_with_a_clock() -> None:
    now = [0.0]
    breaker = Breaker(2, 10, clock=lambda: now[0])
    breaker.failure()
    assert breaker.state == "closed"
    breaker.failure()
    assert breaker.state == "open"
    now[0] = 10.5
    assert breaker.state == "half-open"
    breaker.failure()  # the trial call failed: open again for a full cool-down
    assert breaker.state == "open"


def test_api_key_from_env_or_credentials_directory(tmp_path: Path) -> None:
    config = CompleterConfig()
    assert api_key(config, {"OPENAI_API_KEY": "a"}) == "a"
    (tmp_path / "openai-api-key").write_text("from-file\n")
    assert api_key(config, {"CREDENTIALS_DIRECTORY": str(tmp_path)}) == "from-file"
    assert api_key(config, {}) is None


# ------------------------------------------------------------------ passes through the server


def llm_config(db: Path, server: FakeOpenAI, **sections: Any) -> Config:
    config = config_for(db)
    # The facts offline: the scripted calls are the summaries' and the tiers'.
    config = dataclasses.replace(config, completer=completer_config(server),
                                 facts=FactsConfig(producer="offline"))
    return dataclasses.replace(config, **sections) if sections else config


def chat_file(db: Path, sessions: int = 3, turns: int = 6) -> None:
    conn = make_chat_file(db)
    for s in range(sessions):
        add_turns(conn, f"s{s}", chat_texts(s, turns))
    conn.close()


def llm_pass(store: Store, config: Config, server: FakeOpenAI, **kw: object):
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        return run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True,
                        **kw)  # type: ignore[arg-type]


def test_end_to_end_pass_builds_every_tier_from_the_server(db: Path, server: FakeOpenAI) -> None:
    chat_file(db)
    config = llm_config(db, server)
    store = open_sqlite(config)
    result = llm_pass(store, config, server)
    assert result.outcome == "ok", result.jobs
    conn = store.conn
    gists = [r[0] for r in conn.execute("SELECT content FROM summaries")]
    assert len(gists) == 3 and all(g.startswith("- SUMMARIZE of") for g in gists)
    assert conn.execute("SELECT content FROM profile").fetchone()[0].startswith("- PROFILE")
    assert conn.execute("SELECT content FROM eras").fetchone()[0].count("- ERA") == 1
    assert "- NARRATIVE" in conn.execute("SELECT content FROM narrative").fetchone()[0]
    state = json.loads(conn.execute("SELECT data FROM self_state").fetchone()[0])
    assert state["mood"] == "curious" and state["reflections"]
    sources = {r[0] for r in conn.execute("SELECT dreamd_source FROM summaries")}
    assert sources == {"llm:test-model"}
    # The recorded tokens are what the server reported.
    tokens = conn.execute("SELECT tokens_in, tokens_out FROM dreamd_runs").fetchone()
    assert tokens == (server.prompt_tokens, server.completion_tokens)
    assert (result.tokens_in, result.tokens_out) == tokens
    jobs = {j.job: j for j in result.jobs}
    assert sum(j.tokens_in for j in jobs.values()) == server.prompt_tokens
    assert server.tasks() == ["summarize"] * 3 + ["profile", "era", "narrative", "reflect"]
    store.close()


def test_configuration_error_stops_llm_work_and_burns_no_attempts(
    db: Path, server: FakeOpenAI
) -> None:
    chat_file(db)
    config = llm_config(db, server)
    store = open_sqlite(config)
    before = derived_digest(db)
    server.plan("401")
    result = llm_pass(store, config, server)
    assert len(server.requests) == 1  # one refused call, then no more
    assert result.outcome == "failed"
    assert any("authentication failed" in n for n in result.notes)
    assert store.conn.execute("SELECT COUNT(*) FROM dreamd_failures").fetchone()[0] == 0
    assert store.conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 0
    reasons = {j.job: j.reason for j in result.jobs}
    assert reasons["profile"].startswith("not run: LLM work stopped")
    notes = json.loads(store.conn.execute("SELECT notes FROM dreamd_runs").fetchone()[0])
    assert "authentication failed" in notes[0]
    # Only dreamd's bookkeeping moved (tally, embeddings); no derived memory was written.
    assert before != derived_digest(db)
    store.close()


def test_rejected_input_is_split_once_then_quarantined(db: Path, server: FakeOpenAI) -> None:
    chat_file(db, sessions=1, turns=10)
    config = llm_config(db, server)
    store = open_sqlite(config)
    server.plan("400", "400")  # the whole session, then its first half after the split
    result = llm_pass(store, config, server)
    job = next(j for j in result.jobs if j.job == "summarize")
    assert job.failed == 1
    row = store.conn.execute("SELECT attempts, quarantined FROM dreamd_failures").fetchone()
    assert row == (1, 1)
    assert server.tasks().count("summarize") == 2  # once whole, once split; then no more
    assert store.conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 0
    store.close()


def test_rejected_input_that_fits_after_splitting_is_summarized(
    db: Path, server: FakeOpenAI
) -> None:
    chat_file(db, sessions=1, turns=10)
    config = llm_config(db, server)
    store = open_sqlite(config)
    server.plan("400")
    llm_pass(store, config, server)
    assert server.tasks()[:4] == ["summarize", "summarize", "summarize", "merge"]
    assert store.conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] == 1
    store.close()


def test_invalid_reflection_gets_one_repair_then_the_old_state_stays(
    db: Path, server: FakeOpenAI
) -> None:
    chat_file(db, sessions=1)
    server.schema = "ignore"  # a server without grammars: the model's prose comes through
    # LLM-only memory: with the fallback on, the extractive producer would reflect instead.
    config = dataclasses.replace(llm_config(db, server), jobs=JobsConfig(fallback=False))
    store = open_sqlite(config)
    server.plan("ok", "ok", "ok", "ok", "badjson", "ok")  # repaired on the second try
    llm_pass(store, config, server)
    state = json.loads(store.conn.execute("SELECT data FROM self_state").fetchone()[0])
    assert state["mood"] == "curious"
    add_turns(sqlite3.connect(db, isolation_level=None), "s0", ["more news", "tell me"])
    before = store.conn.execute("SELECT data, updated_at FROM self_state").fetchone()
    server.plan("ok", "ok", "ok", "ok", "badjson", "badjson")
    result = llm_pass(store, config, server)
    assert next(j for j in result.jobs if j.job == "reflect").failed == 1
    # Drives may be mirrored into the state, but the reflection itself did not change.
    after = json.loads(store.conn.execute("SELECT data FROM self_state").fetchone()[0])
    old = json.loads(before[0])
    assert after["reflections"] == old["reflections"] and after["mood"] == old["mood"]
    assert store.conn.execute("SELECT attempts FROM dreamd_failures WHERE job='reflect'"
                              ).fetchone()[0] == 1
    store.close()


def test_token_budget_stops_llm_work_before_it_is_exceeded(db: Path, server: FakeOpenAI) -> None:
    chat_file(db, sessions=4)
    config = llm_config(db, server, budget=BudgetConfig(tokens_per_pass=1500))
    store = open_sqlite(config)
    result = llm_pass(store, config, server)
    assert any("budget.tokens_per_pass" in n for n in result.notes)
    assert result.tokens_in + result.tokens_out <= 1500
    assert store.conn.execute("SELECT COUNT(*) FROM dreamd_failures").fetchone()[0] == 0
    done = store.conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0]
    assert 0 < done < 4
    store.close()


def test_daily_budget_counts_earlier_passes(db: Path, server: FakeOpenAI) -> None:
    chat_file(db, sessions=2)
    config = llm_config(db, server)
    store = open_sqlite(config)
    first = llm_pass(store, config, server)
    used = first.tokens_in + first.tokens_out
    add_turns(sqlite3.connect(db, isolation_level=None), "s0", ["more", "news"])
    tight = dataclasses.replace(config, budget=BudgetConfig(tokens_per_day=used + 10))
    calls = len(server.requests)
    second = llm_pass(store, tight, server)
    assert len(server.requests) == calls
    assert any("budget.tokens_per_day" in n for n in second.notes)
    store.close()


def test_unchanged_inputs_cost_no_tokens(db: Path, server: FakeOpenAI) -> None:
    chat_file(db, sessions=2)
    config = llm_config(db, server)
    store = open_sqlite(config)
    llm_pass(store, config, server)
    era = store.conn.execute("SELECT content FROM eras").fetchone()[0]
    # An era marked stale whose gists did not change (as after a gist re-saved as is).
    store.conn.execute("UPDATE eras SET dreamd_seq = 0")
    store.conn.execute("INSERT INTO dreamd_tier_queue VALUES ('default')")  # as save_gist does
    calls = len(server.requests)
    result = llm_pass(store, config, server)
    eras = next(j for j in result.jobs if j.job == "eras")
    assert eras.done == 1 and eras.tokens_in == 0
    assert len(server.requests) == calls
    assert store.conn.execute("SELECT content FROM eras").fetchone()[0] == era
    store.close()


def test_a_pool_of_workers_summarizes_concurrently(db: Path) -> None:
    fake = FakeOpenAI(delay=0.2).start()
    try:
        chat_file(db, sessions=8)
        config = llm_config(db, fake)
        config = dataclasses.replace(
            config, completer=dataclasses.replace(config.completer, workers=8,
                                                  read_timeout_seconds=2))
        store = open_sqlite(config)
        result = llm_pass(store, config, fake)
        job = next(j for j in result.jobs if j.job == "summarize")
        assert job.done == 8
        assert job.seconds < 8 * 0.2, job.seconds  # calls overlapped: one by one is 1.6 s
        store.close()
    finally:
        fake.stop()


def test_api_key_never_reaches_logs_status_or_the_database(tmp_path: Path,
                                                           server: FakeOpenAI) -> None:
    db = tmp_path / "memory.db"
    chat_file(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMD_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), OPENAI_API_KEY=KEY, DREAMD_EMBED__BACKEND="hashing",
               DREAMD_COMPLETER__BACKEND="openai", DREAMD_COMPLETER__BASE_URL=server.base_url,
               DREAMD_LOG__LEVEL="debug")
    outputs = []
    for plan in (["ok"] * 7, ["401"]):
        server.plan(*plan)
        add_turns(sqlite3.connect(db, isolation_level=None), "s1", ["new", "turns"])
        for args in (["--force"], ["status"], ["status", "--json"], ["show", "--json"]):
            run = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), *args],
                                 env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
            outputs.append(run.stdout + run.stderr)
    assert any("authentication failed" in o for o in outputs)  # the 401 case was exercised
    assert all(KEY not in o for o in outputs)
    assert all(r["auth"] == f"Bearer {KEY}" for r in server.requests)  # it was really used
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path
    # The config itself has no key to leak from: only env or credential file.
    assert "api_key" not in {f.name for f in dataclasses.fields(CompleterConfig)}


def test_status_says_degraded_while_the_breaker_is_open(db: Path, server: FakeOpenAI) -> None:
    from dreamd import report
    from dreamd.cli.render import render_status

    chat_file(db, sessions=4)
    config = llm_config(db, server)
    config = dataclasses.replace(config, completer=dataclasses.replace(
        config.completer, retries=0, breaker_failures=2, breaker_cooldown_seconds=60))
    store = open_sqlite(config)
    server.plan(*["503"] * 10)
    result = llm_pass(store, config, server)
    assert any("BreakerOpen" in n for n in result.notes)
    assert len(server.requests) == 2  # then no call while open
    # Two items burned an attempt each; the rest were not charged.
    assert store.conn.execute("SELECT COUNT(*) FROM dreamd_failures").fetchone()[0] == 2
    data = report.status(store, config, "hashing-256", datetime.now(UTC))
    assert data["llm"].startswith("degraded")
    assert "llm          degraded" in render_status(data)
    store.close()


def test_embeddings_over_the_api_are_stored_under_their_own_model(
    db: Path, server: FakeOpenAI
) -> None:
    from dreamd.backends.openai_backend import OpenAIEmbedder

    chat_file(db, sessions=2)
    config = llm_config(db, server)
    config = dataclasses.replace(config, embed=dataclasses.replace(
        config.embed, backend="openai", model="test-embed"))
    store = open_sqlite(config)
    with (OpenAIEmbedder(config, environ={"OPENAI_API_KEY": KEY}) as embedder,
          OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client):
        result = run_pass(store, config, embedder, client, trigger="test", force=True)
    assert result.outcome == "ok", result.jobs
    rows = store.conn.execute(
        "SELECT model, COUNT(*), MIN(length(vector)), MAX(length(vector)) "
        "FROM dreamd_exchange_vectors GROUP BY model").fetchall()
    assert rows == [(space("openai:test-embed"), 12, 16 * 4, 16 * 4)]
    assert any(r["path"].endswith("/embeddings") for r in server.requests)
    store.close()


def test_a_server_that_is_down_is_named_with_its_cause(db: Path) -> None:
    """Connection refused: the log event, the run record and status say so, with the URL,
    never the key."""
    from structlog.testing import capture_logs

    from dreamd.report import status

    down = FakeOpenAI()
    down.server.server_close()  # never started; its port now refuses connections
    chat_file(db)
    config = llm_config(db, down)
    config = dataclasses.replace(config, completer=dataclasses.replace(
        config.completer, breaker_failures=2, retries=1))
    store = open_sqlite(config)
    with capture_logs() as logs:
        result = llm_pass(store, config, down, log=get_logger())
    cause = f"cannot reach {down.base_url} (ConnectionRefusedError: [Errno 111] Connection refused)"
    assert any(cause in note for note in result.notes), result.notes
    halted = [e for e in logs if e["event"] == "llm_halted"]
    assert halted and cause in halted[0]["detail"]
    report = status(store, config, "hashing-256", datetime.now(UTC))
    store.close()
    assert report["llm"].startswith("degraded: circuit breaker open after 2 transient")
    assert cause in report["llm"]
    assert KEY not in json.dumps(report) and KEY not in json.dumps(logs, default=str)


def test_each_job_uses_its_own_model(db: Path, server: FakeOpenAI) -> None:
    """The job's spec names its [completer] model key: reflect_model for reflect only."""
    chat_file(db)
    config = llm_config(db, server)
    config = dataclasses.replace(config, completer=dataclasses.replace(
        config.completer, reflect_model="big-model"))
    store = open_sqlite(config)
    llm_pass(store, config, server)
    store.close()
    models = {(task, r["body"]["model"]) for task, r in zip(server.tasks(), [
        r for r in server.requests if r["path"].endswith("/chat/completions")], strict=True)}
    assert ("reflect", "big-model") in models
    assert all(model == "test-model" for task, model in models if task != "reflect")


def test_the_sdks_base_url_variable_is_honoured_when_base_url_is_unset(
        db: Path, server: FakeOpenAI) -> None:
    """$OPENAI_BASE_URL points the completer at the server when [completer] base_url is
    "" (the default); status names the server in use."""
    from dreamd.report import backends

    config = dataclasses.replace(completer_config(server), base_url="")
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.base_url}
    with OpenAICompleter(config, environ=environ) as client:
        answer = client.complete(PROMPT)
    assert answer.text and len(server.requests) == 1
    old = os.environ.get("OPENAI_BASE_URL")
    os.environ["OPENAI_BASE_URL"] = server.base_url
    try:
        shown = backends(dataclasses.replace(config_for(db), completer=config), "m")
    finally:
        if old is None:
            del os.environ["OPENAI_BASE_URL"]
        else:
            os.environ["OPENAI_BASE_URL"] = old
    assert shown["completer"] == f"openai-compatible: test-model at {server.base_url}"


def test_an_endpoint_that_cannot_work_is_permanent_and_recall_says_so(
        tmp_path: Path, server: FakeOpenAI) -> None:
    """llama.cpp without embeddings answers 500 "must be created with embedding=True":
    one request, no retries, a configuration error with the server's words; recall on
    the command line prints one line and exits 2."""
    from click.testing import CliRunner

    from dreamd.backends.openai_backend import OpenAIEmbedder
    from dreamd.cli import main

    cannot = "500:Llama model must be created with embedding=True"
    server.plan(cannot)
    config = dataclasses.replace(Config(), completer=completer_config(server),
                                 embed=dataclasses.replace(Config().embed, backend="openai"))
    with (pytest.raises(BackendMisconfigured, match="must be created with embedding=True"),
          OpenAIEmbedder(config, environ={"OPENAI_API_KEY": KEY}) as embedder):
        embedder.embed(["hello"])
    assert len(server.requests) == 1

    db = tmp_path / "memory.db"
    chat_file(db)
    assert CliRunner().invoke(main, ["--db", str(db), "--force"],
                              env={"DREAMD_EMBED__BACKEND": "hashing"}).exit_code == 0
    toml = tmp_path / "dreamd.toml"
    toml.write_text(f'[embed]\nbackend = "openai"\n[completer]\nbase_url = "{server.base_url}"\n')
    server.plan(*[cannot] * 10)
    result = CliRunner().invoke(main, ["--db", str(db), "--config", str(toml), "recall", "hi",
                                       "--user", "default"], env={"OPENAI_API_KEY": KEY})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "cannot do this as configured" in lines[0], result.output


def test_closing_a_memory_hangs_up_on_the_server(db: Path, server: FakeOpenAI) -> None:
    """A Memory with an embedder over the API closes its pooled connection when it is
    closed, not whenever the garbage collector gets to it."""
    from dreamd.memory import Memory

    chat_file(db, sessions=2)
    config = dataclasses.replace(llm_config(db, server), embed=dataclasses.replace(
        Config().embed, backend="openai", model="test-embed"))
    memory = Memory(db, config=config)
    memory.remember("s9", "user", "My sister Ana moved to Porto last spring.", embed=True)
    assert memory.recall("where does my sister live", k=3)
    assert server.connections == 1  # kept alive between calls
    memory.close()
    deadline = time.monotonic() + 30
    while server.connections and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.connections == 0


def test_the_first_call_of_a_pass_imports_nothing(server: FakeOpenAI) -> None:
    """The SDK loads its chat resources when first asked for them; the completer asks when
    it is made (before a pass), so the pass's first calls, made by every worker at once,
    do not all wait on an import. In a process of its own: this one has imported them."""
    script = (
        "import sys\n"
        "from dreamd.backends.openai_backend import OpenAICompleter\n"
        "from dreamd.config import CompleterConfig\n"
        "from dreamd.models import Prompt\n"
        f"c = OpenAICompleter(CompleterConfig(backend='openai', base_url={server.base_url!r},"
        " model='m'))\n"
        "before = set(sys.modules)\n"
        "c.complete(Prompt(task='summarize', system='s', user='u', items=('a',),"
        " max_items=3))\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('openai')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "OPENAI_API_KEY": "test"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout

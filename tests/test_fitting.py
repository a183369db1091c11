"""Every prompt fits the model: against the test server playing a 2,048-token model, a
backlog far larger than the window still builds the profile, eras and narrative, in
parts; a server that counts tokens its own way gets the part halved and tried again."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.dream.cycle import run_pass
from dreamd.ids import narrative_id, profile_id
from dreamd.store import runs
from dreamd.store.tiers import eras_for_user, narrative_row, profile_row
from testkit.openai_server import FakeOpenAI
from tests.helpers import (
    KEY,
    add_turns,
    completer_config,
    config_for,
    make_chat_file,
    open_sqlite,
)

WINDOW = 2048


@pytest.fixture
def small_model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(pad=900, context_tokens=WINDOW).start()  # gists of ~900 characters
    yield fake
    fake.stop()


def backlog(db: Path, sessions: int) -> None:
    """One user, `sessions` sessions over four months: the gists together are many times
    the window."""
    from datetime import UTC, datetime, timedelta

    conn = make_chat_file(db)
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    for s in range(sessions):
        add_turns(conn, f"s{s}", [f"session {s}: I told you about topic {s}, part {i}"
                                  for i in range(6)], start=start + timedelta(days=4 * s))
    conn.close()


def llm_pass(db: Path, server: FakeOpenAI, **completer: object) -> tuple[object, object]:
    config = config_for(db)
    config = dataclasses.replace(config, completer=completer_config(
        server, max_output_tokens=300, context_window=WINDOW, **completer))
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    with store.read() as conn:
        profile = profile_row(conn, profile_id("default"))
        narrative = narrative_row(conn, narrative_id("default"))
        eras = eras_for_user(conn, "default")
        failures = runs.failures(conn)
    store.close()
    assert result.outcome == "ok", (result.jobs, failures)
    assert profile is not None and narrative is not None and len(eras) == 4
    return profile, narrative


def test_a_backlog_many_times_the_window_is_folded_in_parts(db: Path,
                                                           small_model: FakeOpenAI) -> None:
    backlog(db, 30)  # 30 gists of ~900 characters: ~7,000 tokens of gists
    llm_pass(db, small_model)
    tasks = small_model.tasks()
    assert tasks.count("profile") >= 3  # folded: the gists did not fit one request
    assert small_model.refused == 0  # never a request the model refuses
    assert 0 < small_model.largest_request <= WINDOW


def test_a_server_that_counts_tokens_its_own_way_gets_the_part_halved(
        db: Path, small_model: FakeOpenAI) -> None:
    """dreamd believes the window is 4,096 tokens; the model holds 2,048: the first
    too-long request is refused (400 context_length_exceeded), the part is halved and
    the tier is built anyway."""
    backlog(db, 30)
    config = config_for(db)
    config = dataclasses.replace(config, completer=completer_config(
        small_model, max_output_tokens=300, context_window=2 * WINDOW))
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    with store.read() as conn:
        profile = profile_row(conn, profile_id("default"))
        failures = runs.failures(conn)
    store.close()
    assert result.outcome == "ok" and failures == [], (result.jobs, failures)
    assert profile is not None and profile.content.startswith("- PROFILE")
    assert small_model.refused >= 1 and small_model.largest_request <= WINDOW

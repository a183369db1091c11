"""Small local models: JSON constrained by a schema where the server offers it, and
prompt-and-repair where it does not (refused with a 400, or taken and ignored)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.config import Config, FactsConfig, UserConfig
from dreamd.dream.cycle import PassResult, run_pass
from dreamd.dream.prompts import FACTS_SCHEMA, REFLECT_SCHEMA
from testkit.openai_server import FakeOpenAI, task_of
from tests.helpers import KEY, add_turns, completer_config, config_for, make_chat_file, open_sqlite

SAID = ["I moved to Porto for university.", "How is it?", "I started a job at a bakery.",
        "Nice!"]


def llm_pass(tmp_path: Path, server: FakeOpenAI, *plan: str) -> tuple[PassResult, Config,
                                                                      OpenAICompleter]:
    db = tmp_path / "m.db"
    conn = make_chat_file(db)
    add_turns(conn, "s1", SAID)
    conn.close()
    config = dataclasses.replace(config_for(db), user=UserConfig(name="Sam"),
                                 completer=completer_config(server),
                                 facts=FactsConfig(producer="llm"))
    server.plan(*plan)
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as completer:
        result = run_pass(store, config, HashingEmbedder(), completer, trigger="test",
                          force=True)
    store.close()
    return result, config, completer


def chat_requests(server: FakeOpenAI) -> list[tuple[str, dict | None]]:
    """(task, the response_format sent) of every chat request, in order."""
    return [(task_of(r["body"]["messages"][0]["content"]), r["body"].get("response_format"))
            for r in server.requests if r["path"].endswith("/chat/completions")]


@pytest.fixture
def server(request: pytest.FixtureRequest) -> FakeOpenAI:
    fake = FakeOpenAI(schema=getattr(request, "param", "honour")).start()
    request.addfinalizer(fake.stop)
    return fake


def test_facts_and_the_reflection_are_constrained_by_their_schema(
        tmp_path: Path, server: FakeOpenAI) -> None:
    """A server that honours the schema: a weak model's prose cannot come out of it."""
    result, _, completer = llm_pass(tmp_path, server, "badjson")
    sent = chat_requests(server)
    facts = [fmt for task, fmt in sent if task == "facts"]
    reflect = [fmt for task, fmt in sent if task == "reflect"]
    assert facts and facts[0] is not None and facts[0]["type"] == "json_schema"
    assert facts[0]["json_schema"]["schema"] == FACTS_SCHEMA
    assert reflect and reflect[0] is not None
    assert reflect[0]["json_schema"]["schema"] == REFLECT_SCHEMA
    assert all(fmt is None for task, fmt in sent if task in ("summarize", "profile", "era"))
    assert result.outcome == "ok" and completer.schema_refused == {}
    assert len(facts) == 1  # whole at once: no repair was needed


@pytest.mark.parametrize("server", ["refuse"], indirect=True)
def test_a_server_that_refuses_the_schema_is_asked_without_it_from_then_on(
        tmp_path: Path, server: FakeOpenAI) -> None:
    result, _, completer = llm_pass(tmp_path, server)
    sent = chat_requests(server)
    shaped = [i for i, (_, fmt) in enumerate(sent) if fmt is not None]
    assert len(shaped) == 1  # refused once (400), then never sent again to this model
    assert sent[shaped[0] + 1] == (sent[shaped[0]][0], None)  # the same task, plainly
    assert "refused" in completer.schema_refused["test-model"]
    assert result.outcome == "ok"
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.done and not facts.failed


@pytest.mark.parametrize("server", ["ignore"], indirect=True)
def test_a_server_that_ignores_the_schema_gets_prompt_and_repair(
        tmp_path: Path, server: FakeOpenAI) -> None:
    """The schema was taken but the answer is prose: the repair goes out plainly, and
    the model is not sent a schema again."""
    result, _, completer = llm_pass(tmp_path, server, "badjson")
    sent = chat_requests(server)
    first, repair = sent[0], sent[1]
    assert first[1] is not None and repair == ("facts", None)
    assert "ignored" in completer.schema_refused["test-model"]
    assert all(fmt is None for _, fmt in sent[1:])
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.done and not facts.failed

"""Small local models: JSON constrained by a schema where the server offers it, and
prompt-and-repair where it does not (refused with a 400, or taken and ignored)."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dreamd import report
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.openai_backend import OpenAICompleter, OpenAIEmbedder
from dreamd.cli.render import render_status
from dreamd.config import CompleterConfig, Config, EmbedConfig, FactsConfig, PassConfig, UserConfig
from dreamd.dream.cycle import PassResult, run_pass
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.dream.prompts import facts_schema, reflect_schema
from testkit.openai_server import FakeOpenAI, task_of
from tests.helpers import (
    KEY,
    add_turns,
    completer_config,
    config_for,
    dreamd_env,
    make_chat_file,
    open_sqlite,
)

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
    assert facts[0]["json_schema"]["schema"] == facts_schema()
    assert reflect and reflect[0] is not None
    assert reflect[0]["json_schema"]["schema"] == reflect_schema()
    assert all(fmt is None for task, fmt in sent if task in ("summarize", "profile", "era"))
    assert result.outcome == "ok" and completer.schema_refused == {}
    assert len(facts) == 1  # whole at once: no repair was needed


@pytest.mark.parametrize("server", ["refuse"], indirect=True)
def test_a_server_that_refuses_the_schema_is_asked_without_it_from_then_on(
        tmp_path: Path, server: FakeOpenAI) -> None:
    result, _, completer = llm_pass(tmp_path, server)
    sent = chat_requests(server)
    # Refused (400) in both shapes servers know, then asked plainly, and from then on
    # this model is never sent a schema again.
    assert [(task, fmt and fmt["type"]) for task, fmt in sent[:3]] == [
        ("facts", "json_schema"), ("facts", "json_object"), ("facts", None)]
    assert all(fmt is None for _, fmt in sent[3:]) and len(sent) > 3
    assert "refused" in completer.schema_refused["test-model"]
    assert result.outcome == "ok"
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.done and not facts.failed


def test_a_refusal_for_another_reason_keeps_the_schema(tmp_path: Path,
                                                      server: FakeOpenAI) -> None:
    """A 400 that is not about the schema (the prompt too long, as a server counts it)
    is the input's problem: the schema is not given up for it."""
    _, _, completer = llm_pass(
        tmp_path, server, "400:This model's maximum context length is 4096 tokens")
    sent = chat_requests(server)
    assert sent[0][0] == "facts" and sent[0][1] is not None and sent[0][1]["type"] == \
        "json_schema"
    assert completer.schema_refused == {}
    assert all(fmt is not None and fmt["type"] == "json_schema" for task, fmt in sent
               if task in ("facts", "reflect"))


@pytest.mark.parametrize("server", ["json_object"], indirect=True)
def test_llama_cpp_pythons_schema_shape_is_found_and_kept(
        tmp_path: Path, server: FakeOpenAI) -> None:
    """llama-cpp-python answers json_schema with a 500 naming response_format (not a
    transient failure: asked once), and takes a json_object with the schema."""
    result, _, completer = llm_pass(tmp_path, server, "badjson")
    sent = [(task, fmt and fmt["type"]) for task, fmt in chat_requests(server)]
    assert sent[:2] == [("facts", "json_schema"), ("facts", "json_object")]
    assert ("reflect", "json_object") in sent and sent.count(("facts", "json_schema")) == 1
    assert completer.schema_refused == {} and result.outcome == "ok"


@pytest.mark.parametrize("server", ["ignore"], indirect=True)
def test_a_server_that_ignores_the_schema_gets_prompt_and_repair(
        tmp_path: Path, server: FakeOpenAI) -> None:
    """The schema was taken but the answer is prose: the repair goes out plainly, and
    the model is not sent a schema again."""
    result, _, completer = llm_pass(tmp_path, server, "badjson")
    sent = chat_requests(server)
    first, repair = sent[0], sent[1]
    assert first[1] is not None and repair == ("facts", None)
    assert "answered without it" in completer.schema_refused["test-model"]
    assert all(fmt is None for _, fmt in sent[1:])
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.done and not facts.failed


def check_llm(tmp_path: Path, base_url: str, window: int = 8192, *args: str,
              backend: str = "openai") -> subprocess.CompletedProcess[str]:
    """`dreamd check-llm` as a user runs it, against `base_url`."""
    config = tmp_path / "dreamd.toml"
    config.write_text(f'[completer]\nbackend = "{backend}"\nbase_url = "{base_url}"\n'
                      f'model = "test-model"\ncontext_window = {window}\n'
                      'connect_timeout_seconds = 1.0\n')
    return subprocess.run([sys.executable, "-m", "dreamd", "--config", str(config),
                           "--db", str(tmp_path / "none.db"), "check-llm", *args],
                          capture_output=True, text=True, env=dreamd_env(OPENAI_API_KEY=KEY),
                          timeout=120)


def test_check_llm_on_a_good_server_says_usable(tmp_path: Path, server: FakeOpenAI) -> None:
    run = check_llm(tmp_path, server.base_url)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(ln.startswith("ok   server") for ln in lines)
    assert any(ln.startswith("ok   schema") and "json_schema" in ln for ln in lines)
    assert any(ln.startswith("ok   summary  accepted") for ln in lines)
    assert any(ln.startswith("ok   facts    accepted") for ln in lines)
    assert lines[-1] == "this model will give usable memory"
    assert not (tmp_path / "none.db").exists()  # a probe writes nothing


@pytest.mark.parametrize("server", ["refuse"], indirect=True)
def test_check_llm_says_when_the_server_takes_no_schema(tmp_path: Path,
                                                        server: FakeOpenAI) -> None:
    run = check_llm(tmp_path, server.base_url)
    assert run.returncode == 1
    schema = next(ln for ln in run.stdout.splitlines() if "schema" in ln.split()[:2])
    assert schema.startswith("FAIL schema") and "refused" in schema
    assert "grammar" in run.stdout  # what to change


def test_check_llm_reads_a_4k_window_and_says_what_to_set(tmp_path: Path) -> None:
    small = FakeOpenAI(context_tokens=4096).start()
    try:
        run = check_llm(tmp_path, small.base_url, window=8192)
    finally:
        small.stop()
    assert run.returncode == 1
    assert "FAIL context  the model holds 4096 tokens (llama.cpp /props), dreamd assumes " \
           "8192" in run.stdout
    assert "set completer.context_window = 4096" in run.stdout
    assert run.stdout.splitlines()[-1].startswith("usable, once the configuration is mended")


def test_check_llm_json_and_the_offline_backend(tmp_path: Path, server: FakeOpenAI) -> None:
    run = check_llm(tmp_path, server.base_url, 8192, "--json")
    data = json.loads(run.stdout)
    assert run.returncode == 0 and data["usable"] is True
    assert [c["check"] for c in data["checks"]] == ["server", "context", "schema", "summary",
                                                    "facts"]
    offline = check_llm(tmp_path, server.base_url, backend="extractive")
    assert offline.returncode == 2 and offline.stdout == ""
    assert offline.stderr.strip().startswith("Error: completer.backend is extractive")


def test_check_llm_on_a_dead_server_is_one_line_and_69(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = check_llm(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert run.returncode == 69 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1
    assert "cannot reach" in run.stderr and "Connection refused" in run.stderr


def test_a_job_cut_short_by_its_share_of_the_pass_says_so(tmp_path: Path) -> None:
    """A model this slow cannot summarize every session in a two-second pass: the job
    says it stopped at its share, and how much is left (the status shows it)."""
    slow = FakeOpenAI(delay=0.3).start()
    try:
        db = tmp_path / "m.db"
        conn = make_chat_file(db)
        for s in range(12):
            add_turns(conn, f"s{s}", SAID)
        conn.close()
        config = dataclasses.replace(
            config_for(db), completer=completer_config(slow),
            facts=FactsConfig(producer="offline"), pass_=PassConfig(max_seconds=2.0))
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as completer:
            result = run_pass(store, config, HashingEmbedder(), completer, trigger="test",
                              force=True)
        status = render_status(report.status(store, config, "hashing", datetime.now(UTC)))
        store.close()
    finally:
        slow.stop()
    summarize = next(j for j in result.jobs if j.job == "summarize")
    assert summarize.remaining > 0
    said = summarize.errors[0]
    assert said.startswith("stopped at its share of the pass (50% of what was left)")
    assert said.endswith(f"with {summarize.remaining} left for the next round or pass")
    assert said in status


def test_an_embedder_failure_is_named_as_such_once(tmp_path: Path) -> None:
    """An embedding server that cannot be reached, beside the offline completer: the pass
    says embedding stopped (not LLM work), with the cause once, and the jobs it kept from
    running point to it instead of repeating it."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "m.db"
    conn = make_chat_file(db)
    add_turns(conn, "s1", SAID)
    conn.close()
    config = dataclasses.replace(
        config_for(db), embed=EmbedConfig(backend="openai", base_url=f"http://127.0.0.1:{port}/v1"),
        completer=CompleterConfig(retries=0, breaker_failures=1, connect_timeout_seconds=0.5))
    store = open_sqlite(config)
    with OpenAIEmbedder(config, environ={"OPENAI_API_KEY": KEY}) as embedder:
        result = run_pass(store, config, embedder, ExtractiveCompleter(embedder),
                          trigger="test", force=True)
    status = render_status(report.status(store, config, embedder.model, datetime.now(UTC)))
    store.close()
    stopped = [n for n in result.notes if "stopped for this pass" in n]
    assert len(stopped) == 1 and stopped[0].startswith("embedding stopped for this pass")
    assert "LLM work" not in status and status.count("Connection refused") <= 3
    skipped = [j.reason for j in result.jobs if not j.ran and "stopped" in j.reason]
    assert skipped and all(r.startswith("not run: embedding stopped") and "refused" not in r
                           for r in skipped)
    failed = [e for j in result.jobs for e in j.errors]
    assert failed and all("the embedder: " in e for e in failed if "Unavailable" in e)


def test_a_fact_copied_from_the_worked_example_is_made_up() -> None:
    """The facts prompt shows one worked example; an answer that gives it back names what
    the turns never said, and is rejected like any other made-up fact."""
    from dreamd.backends.validate import source_of
    from dreamd.dream.jobs.facts_asked import parsed
    from dreamd.dream.prompts import facts_prompt
    from dreamd.errors import OutputInvalid

    prompt = facts_prompt({"user": "Sam", "agent": "Wren"},
                          ["[3] Sunday 7 May 2023. Sam: I moved to Porto for university."], [])
    copied = ('{"facts": [{"subject": "Kai", "statement": "Kai moved into a flat on Elm '
              'Street in late April 2024.", "about": "home", "valid_from": null, '
              '"turns": [3], "replaces": []}]}')
    with pytest.raises(OutputInvalid, match="names what the turns do not: Kai"):
        parsed(copied, {3}, set(), source_of(prompt))
    own = ('{"facts": [{"subject": "Sam", "statement": "Sam moved to Porto for university '
           'in May 2023.", "about": "home", "valid_from": "2023-05-07", "turns": [3], '
           '"replaces": []}]}')
    assert parsed(own, {3}, set(), source_of(prompt))[0][0].statement.startswith("Sam moved")


def test_check_llm_gives_the_servers_words_not_a_bigger_model_for_a_misconfiguration(
        tmp_path: Path, server: FakeOpenAI) -> None:
    server.plan("404:model 'test-model' not found", "404:model 'test-model' not found")
    run = check_llm(tmp_path, server.base_url)
    lines = run.stdout.splitlines()
    summary = lines.index(next(ln for ln in lines if ln.startswith("FAIL summary")))
    assert "not found: check base_url and the model name" in lines[summary]
    assert not lines[summary + 1].lstrip().startswith("->")  # no advice to change models
    assert run.returncode == 1

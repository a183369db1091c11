"""Junk never becomes memory: the checks as a table, and a weak model's answers end to end."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.llm_output import clean
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.validate import junk
from dreamd.config import Config, FactsConfig, JobsConfig
from dreamd.dream.cycle import PassResult, run_pass
from dreamd.dream.prompts import era_prompt, reflect_prompt, summary_prompt
from dreamd.errors import OutputInvalid
from dreamd.models import Prompt
from testkit.openai_server import FakeOpenAI
from tests.helpers import (
    add_turns,
    chat_texts,
    completer_config,
    config_for,
    make_chat_file,
    open_sqlite,
)

NAMES = {"user": "Sam", "agent": "Wren"}
TURNS = [f"user: {t}" for t in chat_texts(0, 8)]
GIST = summary_prompt(NAMES, None, TURNS, 8)
ERA = era_prompt(NAMES, "2023-09", ["Sam adopted a dog called Biscuit.",
                                    "Sam ran a half marathon in 1:52."], 6)
LOOP = "\n".join(["Sam talked about hiking with his sister in the mountains."] * 40)


@pytest.mark.parametrize(("answer", "prompt", "why"), [
    ("", GIST, "empty answer"),
    ("   \n ", GIST, "empty answer"),
    ("<<SYS>>", GIST, "marker '<<SYS>>'"),
    ("<<SYS>>\nSam hiked with his sister.", GIST, "marker '<<SYS>>'"),
    ("[INST] Summarize [/INST] Sam hiked.", GIST, "marker '[INST]'"),
    ("<|im_start|>assistant\nSam hiked.", GIST, "marker '<|im_start|>'"),
    ("<start_of_turn>model\nSam hiked.", GIST, "marker '<start_of_turn>'"),
    ("Sam hiked. </data> more", GIST, "marker '</data>'"),
    (LOOP, GIST, "repeats itself in a loop"),
    (ERA.system, ERA, "echoes the instructions"),
    ("Write the digest of 2023-09 in Sam's life from the gists of that month's "
     "conversations with Wren: what was happening, one point per line.", ERA,
     "echoes the instructions"),
    ("\n".join(f"- {t}" for t in TURNS[:6]), GIST, "copies the material"),
    (LOOP, reflect_prompt(NAMES, {}, [], {}), "repeats itself in a loop"),
])
def test_junk_is_named(answer: str, prompt: Prompt, why: str) -> None:
    problem = junk(answer, prompt)
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize(("answer", "prompt"), [
    ("Sam spent the weekend hiking with his sister and felt closer to her.", GIST),
    ("- Sam adopted Biscuit, a beagle mix.\n- Sam ran a half marathon in 1:52.", ERA),
    ('{"mood": "warm", "mood_score": 0.4, "energy": 0.6, "self_narrative": "I listened.",'
     ' "reflection": "Sam is proud.", "topics": ["running"]}', reflect_prompt(NAMES, {}, [], {})),
    # one line quoted from the material inside a real summary is fine
    (f"Sam kept returning to one thought: {TURNS[0][6:]}\nHe plans to go again.", GIST),
])
def test_a_real_answer_passes(answer: str, prompt: Prompt) -> None:
    assert junk(answer, prompt) is None


# What a 135M model gave back on a real conversation, each line as it was stored
# before these checks (names changed), with the input it was given.
SMALL = summary_prompt({"user": "Mia", "agent": "Leo"}, None, [
    "user: Hey Leo! So, I started a new job at the animal shelter last week.",
    "assistant: Absolutely! That sounds wonderful, how are the dogs settling in?",
    "user: Pretty well, the new house has a big yard so they can explore."], 8)


@pytest.mark.parametrize(("raw", "why"), [
    ("<data-9636476888c>\nuser: Hey Leo! So, I started a new job at the animal shelter "
     "last week.\nassistant: Absolutely! That sounds wonderful.\n</data-9636476888c>",
     "replays the conversation"),
    ("<data-312e3ef608c>\n- Mia started a new job at the animal shelter.\n"
     "- User: Hey Leo! So, I started a new job", "replays the conversation"),
    ("You're looking for a new job, and your dog is getting ready to explore the house.",
     "speaks to the reader"),
    ("- Mia started at the shelter.\n- Your dogs love the yard.", "speaks to the reader"),
    ("Hi Mia! Great to hear about the shelter.", "speaks to the reader"),
    ("Mia started a new job at the animal shelter and the dogs like the yard.\n\nBest,\nAlex",
     "speaks to the reader"),
    ("Mia started a new job; she buys treats at www.gabby-babe-cafe.com/products for them.",
     "names what its input does not: www.gabby-babe-cafe.com/products"),
    ("Mia started a new job at the shelter with her friend Priya last week.",
     "names what its input does not: Priya"),
    # an era a 135M model wrote: a list of the gist's topics, one name made up
    ("Mia, shelter, job\nAlex, shelter, dogs", "names what its input does not: Alex"),
    ("Mia started at the animal shelter 3 weeks ago and walks 12 dogs.",
     "names what its input does not: 3, 12"),
    ("Mia's new job <b>at the shelter</b> is going well.", "marker '<b>'"),
    ("Mia started a new job. <|assistant|> Great!", "marker '<|assistant|>'"),
])
def test_a_small_models_stored_lines_are_rejected(raw: str, why: str) -> None:
    problem = junk(clean(raw, "summarize"), SMALL)
    assert problem is not None and why in problem, problem


def test_a_summary_that_replays_named_speakers_is_rejected() -> None:
    """An imported conversation names its speakers: a gist of "Mia: …" lines replays it."""
    prompt = summary_prompt({"user": "Mia", "agent": "Leo"}, None, [
        "Mia: I started a new job at the animal shelter last week.",
        "Leo: How are the dogs settling in?",
        "Mia: Pretty well, the yard is big.", "Leo: Lovely."], 8)
    problem = junk("Mia: I started at the shelter.\nLeo: How are the dogs?", prompt)
    assert problem is not None and "replays the conversation ('Mia:'" in problem
    assert junk("Mia started a new job at the animal shelter; Leo asked about the dogs.",
                prompt) is None


@pytest.mark.parametrize("raw", ["</data-96364768c5a1b>", "<data-312e3ef608c>\n</data-3>"])
def test_an_answer_that_is_only_a_copied_delimiter_is_empty(raw: str) -> None:
    with pytest.raises(OutputInvalid, match="empty"):
        clean(raw, "era")


@pytest.mark.parametrize("answer", [
    # the copied delimiter is stripped: what is inside is a fine gist
    "<data-9636476888c>\nMia started a new job at the animal shelter last week; her "
    "dogs explore the big yard of the new house.\n</data-9636476888c>",
    "In the last week Mia began working at an animal shelter. Leo asked about the dogs.",
    "- Mia's dogs are settling into the new house.\n- Mia works at the animal shelter.",
    "Best friends Mia and Leo talked about the dogs and the yard.",
])
def test_a_grounded_third_person_answer_passes(answer: str) -> None:
    assert junk(clean(answer, "summarize"), SMALL) is None


def chat_with(tmp_path: Path, server: FakeOpenAI, jobs: JobsConfig, sessions: int = 1
              ) -> Config:
    """A file of `sessions` sessions of 8 turns, and a config that summarizes them with
    the test server (facts offline)."""
    db = tmp_path / "memory.db"
    conn = make_chat_file(db)
    for s in range(sessions):
        add_turns(conn, f"s{s + 1}", chat_texts(s, 8))
    conn.close()
    return dataclasses.replace(config_for(db), completer=completer_config(server),
                               facts=FactsConfig(producer="offline"), jobs=jobs)


def pass_against(tmp_path: Path, *plan: str, jobs: JobsConfig | None = None
                 ) -> tuple[PassResult, list[str], list[str], list[str]]:
    """One forced pass over a one-session file with the test server answering `plan`
    first: the result, the gists stored, summarize's failure records, the tasks asked."""
    server = FakeOpenAI().start()
    try:
        config = chat_with(tmp_path, server, jobs or JobsConfig(fallback=False))
        server.plan(*plan)
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            result = run_pass(store, config, HashingEmbedder(), completer, trigger="test",
                              force=True)
        gists = [r[0] for r in store.conn.execute("SELECT content FROM summaries")]
        failures = [r[0] for r in store.conn.execute(
            "SELECT last_error FROM dreamd_failures WHERE job = 'summarize'")]
        store.close()
    finally:
        server.stop()
    return result, gists, failures, server.tasks()


def test_a_weak_models_junk_is_never_stored(tmp_path: Path) -> None:
    """The test server answers like Gemma 3 270M did: <<SYS>> alone, then a 40-line loop.
    Junk is asked for once more; junk twice is a failure with its reasons, and no gist
    is stored."""
    loop = "\\n".join(["The user keeps thinking about hiking with the sister."] * 40)
    result, gists, failures, tasks = pass_against(tmp_path, "say:<<SYS>>", f"say:{loop}")
    assert gists == []
    assert len(failures) == 1 and "repeats itself in a loop" in failures[0]
    assert "first: chat-template or prompt marker '<<SYS>>'" in failures[0]
    summarize = {r.job: r for r in result.jobs}["summarize"]
    assert summarize.failed == 1 and summarize.done == 0
    assert tasks.count("summarize") == 2  # asked once more, then given up


def test_one_bad_answer_then_a_good_one_is_stored(tmp_path: Path) -> None:
    _, gists, failures, _ = pass_against(tmp_path, "say:<<SYS>>")
    assert len(gists) == 1 and "SUMMARIZE" in gists[0] and "<<SYS>>" not in gists[0]
    assert failures == []


def test_junk_twice_is_built_by_the_extractive_fallback_and_marked(tmp_path: Path) -> None:
    """With the fallback on (the default), the session still gets a gist: the extractive
    producer's, marked as the fallback's, with the reason in the pass's notes."""
    loop = "\\n".join(["The user keeps thinking about hiking with the sister."] * 40)
    result, gists, failures, tasks = pass_against(tmp_path, "say:<<SYS>>", f"say:{loop}",
                                                  jobs=JobsConfig())
    assert len(gists) == 1 and "<<SYS>>" not in gists[0]
    assert "The user keeps thinking about hiking with the sister." not in gists[0]  # the loop
    assert failures == []
    assert tasks.count("summarize") == 2  # the model was asked twice, then not again
    note = next(n for n in result.notes if "extractive fallback" in n)
    assert "summarize 1" in note and "repeats itself in a loop" in note
    store = open_sqlite(config_for(tmp_path / "memory.db"))
    sources = [r[0] for r in store.conn.execute("SELECT dreamd_source FROM summaries")]
    store.close()
    assert sources == ["fallback:test-model"]


def test_the_model_is_asked_again_later_and_its_answer_replaces_the_fallback(
        tmp_path: Path) -> None:
    server = FakeOpenAI().start()
    try:
        config = chat_with(tmp_path, server, JobsConfig(fallback_retry_hours=0))
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            server.plan("say:<<SYS>>", "say:<<SYS>>")
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)
            first = store.conn.execute("SELECT dreamd_source FROM summaries").fetchall()
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)
        rows = store.conn.execute("SELECT content, dreamd_source FROM summaries").fetchall()
        store.close()
    finally:
        server.stop()
    assert first == [("fallback:test-model",)]
    assert len(rows) == 1 and rows[0][1] == "llm:test-model" and "SUMMARIZE" in rows[0][0]


def test_a_prompt_that_failed_is_not_sent_again_in_the_same_pass(tmp_path: Path) -> None:
    """Under --force a second round runs summarize again for what is left; the session
    whose answers were junk twice waits for the next pass instead of being asked again."""
    server = FakeOpenAI().start()
    try:
        config = chat_with(tmp_path, server, JobsConfig(fallback=False), sessions=2)
        server.plan("say:<<SYS>>", "say:<<SYS>>")
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            result = run_pass(store, config, HashingEmbedder(), completer, trigger="test",
                              force=True)
        store.close()
    finally:
        server.stop()
    summarize = {r.job: r for r in result.jobs}["summarize"]
    assert summarize.done == 1 and summarize.failed == 1
    assert server.tasks().count("summarize") == 3  # junk, junk, then the other session


def test_an_answer_about_nothing_in_its_input_is_rejected_by_the_embedder() -> None:
    """With the local model, an answer far from its material (one a small model gave)
    is off topic; a real gist of the same turns is not."""
    from dreamd.backends.local import LocalEmbedder
    from dreamd.config import Config
    from dreamd.dream.jobs.base import JobContext
    from dreamd.dream.jobs.budget import Budget
    from tests.helpers import RecordingCompleter

    embedder = LocalEmbedder()
    ctx = JobContext.for_pass(None, Config(), embedder, RecordingCompleter(None), Budget())  # type: ignore[arg-type]
    off = ctx.asking.off_topic("This is the text you're looking for.", SMALL)
    assert off is not None and "not about its input" in off
    assert ctx.asking.off_topic("Mia started a new job at the animal shelter last week; her dogs "
                         "like the big yard of the new house.", SMALL) is None


def test_a_fallbacks_answer_is_not_kept_as_the_models_for_its_input(tmp_path: Path) -> None:
    """The era the fallback built is stored, but not as the answer to its input: the same
    input later goes to the model instead of coming back from the cache as its answer."""
    server = FakeOpenAI().start()
    try:
        config = chat_with(tmp_path, server, JobsConfig())
        server.plan("ok", "ok", "say:<<SYS>>", "say:<<SYS>>")  # summarize, profile, era x2
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)
        sources = dict(store.conn.execute("SELECT 'era', dreamd_source FROM eras UNION ALL "
                                          "SELECT 'profile', dreamd_source FROM profile"))
        cached = {job for (job,) in store.conn.execute("SELECT job FROM dreamd_outputs")}
        store.close()
    finally:
        server.stop()
    assert server.tasks()[:4] == ["summarize", "profile", "era", "era"]
    assert sources == {"era": "fallback:test-model", "profile": "llm:test-model"}
    assert "profile" in cached and "eras" not in cached


def test_retry_fallback_sends_the_fallbacks_gists_back_at_once(tmp_path: Path) -> None:
    """After a model change a user need not wait a day: `dreamd retry --fallback`."""
    from click.testing import CliRunner

    from dreamd.cli import main

    server = FakeOpenAI().start()
    try:
        config = chat_with(tmp_path, server, JobsConfig())  # retried after 24 h
        server.plan("say:<<SYS>>", "say:<<SYS>>")
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)
            sent = CliRunner().invoke(main, ["--db", config.db, "retry", "--fallback"])
            again = CliRunner().invoke(main, ["--db", config.db, "retry", "--fallback"])
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)
        sources = [r[0] for r in store.conn.execute("SELECT dreamd_source FROM summaries")]
        store.close()
    finally:
        server.stop()
    assert sent.exit_code == 0 and "1 gist the fallback made goes back" in sent.output
    assert again.exit_code == 2 and "no fallback gist is waiting" in again.output
    assert sources == ["llm:test-model"]

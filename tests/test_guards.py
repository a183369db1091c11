"""The guards keep what a capable model writes and refuse what a weak one does: judged on
both answer corpora (tests/data/answers_*.txt), and the cases the corpora showed wrong on
99a8389, each pinned down."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dreamd import report
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.local import LocalEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.validate import source_of, ungrounded
from dreamd.cli.render import render_status
from dreamd.config import Config, FactsConfig, JobsConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.facts_asked import parsed
from dreamd.dream.prompts import facts_prompt, summary_prompt
from dreamd.errors import OutputInvalid
from dreamd.text.dates import long_date
from dreamd.text.keys import Said, vector_key
from testkit.openai_server import FakeOpenAI
from testkit.requests import DATA, chats, read_answers, said
from tests.helpers import (
    T0,
    RecordingCompleter,
    add_turns,
    chat_texts,
    completer_config,
    config_for,
    make_chat_file,
    open_sqlite,
)


@pytest.fixture(scope="module")
def minilm() -> LocalEmbedder:
    return LocalEmbedder()


def test_each_check_keeps_the_good_corpus_and_refuses_the_bad(minilm: LocalEmbedder) -> None:
    """At least 98 % of good answers (or facts) kept and 98 % of bad ones refused, by each
    check alone; and by each job's checks together. On 724f86e off-topic alone let
    another person's profile, narrative or month through (107 of 111 refused, 96.4 %):
    against the centre of the material they read alike (cosine 0.40-0.43)."""
    from testkit.acceptance import acceptance

    checks, jobs = acceptance(minilm)
    assert set(checks.good) >= {"markers", "loop", "echo", "copy", "replay", "reader",
                                "grounded", "off-topic", "json", "shape", "turns"}
    for name in checks.good:
        assert checks.kept[name] >= 0.98 * checks.good[name], (name, checks.misses)
        assert checks.refused[name] >= 0.98 * checks.bad[name], (name, checks.misses)
    for job in jobs.good:
        assert jobs.kept[job] >= 0.98 * jobs.good[job], (job, checks.misses)
        assert jobs.refused[job] >= 0.98 * jobs.bad[job], (job, checks.misses)


def test_the_off_topic_floor_is_chosen_on_one_person_and_holds_on_the_other(
        minilm: LocalEmbedder) -> None:
    """The floor in use is the one the corpora choose by a rule stated beforehand (half way
    between the good answers' 2nd percentile and the bad's 98th), whichever person's
    requests it is chosen on; and on the other person's, which it was not chosen on, it
    keeps 98 % of the good answers and refuses 98 % of the bad."""
    from dreamd.backends.model_files import MODEL_ID
    from dreamd.dream.jobs.topic import ON_TOPIC
    from testkit.acceptance import held_out

    for held in held_out(minilm):
        assert held.floor == ON_TOPIC[MODEL_ID], held
        assert held.kept >= 0.98 * held.good and held.refused >= 0.98 * held.bad, held


def test_a_capable_models_gists_take_one_request_each() -> None:
    """The demo's sample conversations, the server answering each summarize request as a
    capable model does (the good corpus): every gist is the model's, and dreamd asks at
    most 1.1 times a gist (on 99a8389, 55 requests for 30 sessions)."""
    from testkit.acceptance import requests_per_gist

    (kept, gists), asked = requests_per_gist()
    assert gists == 12 and kept == gists
    assert asked <= 1.1 * gists


def test_a_good_gist_is_measured_against_its_turns_text(minilm: LocalEmbedder) -> None:
    """A good gist is about what the turns say, however the prompt comes: with the turns'
    stored vectors (retrieval keys, as a first summary's prompt carries them) or without
    (a summary folded into the previous gist, a merge): both ways it is kept. Measured
    against the turns as single role-prefixed lines ("user: got the job"), the terse
    second sample's good gists fell under the floor."""
    chat = next(c for c in chats() if c.name == "second")
    answers = read_answers(DATA / "answers_good.txt")
    ctx = JobContext.for_pass(None, Config(), minilm, RecordingCompleter(None), Budget())  # type: ignore[arg-type]
    kept = []
    for session in chat.sessions:
        if session.key not in answers:
            continue
        people = {"user": chat.names["user"], "assistant": chat.names["agent"]}
        keys = [vector_key(Said(people[role], content, at,
                                people["assistant" if role == "user" else "user"]))
                for role, content, at in session.turns]
        for vectors in (minilm.embed(keys), None):
            prompt = summary_prompt(chat.names, None, said(session), 8, vectors)
            kept.append(ctx.asking.off_topic(answers[session.key], prompt) is None)
    assert kept == [True] * 16  # every whole-session gist of the second sample, both ways


TURNS = ["[3] Sunday 17 September 2023. Sam: I went to the lake yesterday with Ana.",
         "[4] Sunday 17 September 2023. Sam: Last year I ran my first marathon, and three "
         "years ago I moved to Porto.",
         "[5] Sunday 17 September 2023. Sam: The first of October is my sister's birthday."]
PROMPT = facts_prompt({"user": "Sam", "agent": "Wren"}, TURNS, [])


def fact(statement: str, turn: int, subject: str = "Sam") -> dict[str, object]:
    return {"subject": subject, "statement": statement, "about": None, "valid_from": None,
            "turns": [turn], "replaces": []}


@pytest.mark.parametrize(("statement", "turn"), [
    ("On 16 September 2023 Sam went to the lake with Ana.", 3),
    ("Sam ran his first marathon in 2022.", 4),
    ("Sam moved to Porto in 2020.", 4),
    ("Sam's sister's birthday is on 1 October.", 5),
])
def test_a_date_the_turns_imply_is_grounded(statement: str, turn: int) -> None:
    """The instructions ask for absolute dates: one resolved from the turn's own date
    ("yesterday" said on 17 September 2023) is not made up."""
    answer = json.dumps({"facts": [fact(statement, turn)]})
    assert [c.statement for c, _, _ in parsed(answer, {3, 4, 5}, set(), source_of(PROMPT))] \
        == [statement]


NIGHT_AND_COUNT = [
    "[6] Saturday 22 March 2025. Jonah: spent the night in a&e with my son",
    "[7] Friday 2 May 2025. Jonah: quit coffee cold turkey. day 3. headache from hell",
    "[8] Saturday 22 March 2025. Jonah: new job going well. week two, loads to learn"]


@pytest.mark.parametrize(("statement", "turn"), [
    # a night is named by the evening it begins: the one just gone began the day before
    ("Jonah spent the night of 21 March 2025 in A&E with his son.", 6),
    # "day 3" said on 2 May: the count's first day was 30 April
    ("Jonah quit coffee cold turkey on 30 April 2025.", 7),
    # "week two" said on Saturday 22 March: week one was the week of 10 March
    ("Jonah started his new job in the week of 10 March 2025.", 8),
])
def test_a_night_or_a_count_of_days_implies_its_date(statement: str, turn: int) -> None:
    prompt = facts_prompt({"user": "Jonah", "agent": "Wren"}, NIGHT_AND_COUNT, [])
    answer = json.dumps({"facts": [fact(statement, turn, "Jonah")]})
    assert [c.statement for c, _, _ in parsed(answer, {6, 7, 8}, set(), source_of(prompt))] \
        == [statement]


@pytest.mark.parametrize("statement", [
    "Jonah spent the night of 19 March 2025 in A&E.",  # not the night before
    "Jonah quit coffee on 26 April 2025.",  # not day 3's first day
])
def test_a_night_or_a_count_does_not_ground_other_days(statement: str) -> None:
    prompt = facts_prompt({"user": "Jonah", "agent": "Wren"}, NIGHT_AND_COUNT, [])
    answer = json.dumps({"facts": [fact(statement, 6, "Jonah")]})
    with pytest.raises(OutputInvalid, match="names what the turns do not"):
        parsed(answer, {6, 7, 8}, set(), source_of(prompt))


SOURCE = ("user: we looked at houses near Todmorden and Hebden-Bridge. Mira's drawing "
          "is on the cast. The Smiths came round. Jean helped.")


@pytest.mark.parametrize(("answer", "made_up"), [
    ("They saw the Todmorden-area houses near Hebden Bridge.", []),  # a hyphened part
    ("The drawing is by Mira, and the Smith family came.", []),  # possessive, plural
    ("He thanked the Smiths’ son and both Jeans.", []),
    ("He met Jean-Luc and Anne-Marie.", ["Jean-Luc", "Anne-Marie"]),  # a new name
    ("He met Priyanka at the Leeds-based firm.", ["Priyanka", "Leeds-based"]),
])
def test_a_name_is_grounded_in_any_of_its_english_forms(answer: str,
                                                        made_up: list[str]) -> None:
    assert ungrounded(answer, SOURCE) == made_up


def test_a_date_nothing_implies_is_not() -> None:
    answer = json.dumps({"facts": [fact("Sam went to the lake on 27 June 2023.", 3)]})
    with pytest.raises(OutputInvalid, match="names what the turns do not: 27"):
        parsed(answer, {3, 4, 5}, set(), source_of(PROMPT))


def test_one_made_up_fact_costs_that_fact_not_the_batch() -> None:
    answer = json.dumps({"facts": [
        fact("Sam went to the lake with Ana.", 3),
        fact("Sam went to the lake with Priyanka.", 3),
        fact("Sam moved to Porto.", 4)]})
    kept = parsed(answer, {3, 4, 5}, set(), source_of(PROMPT))
    assert [c.statement for c, _, _ in kept] == ["Sam went to the lake with Ana.",
                                                 "Sam moved to Porto."]


GIST_TURNS = ["user: I went to the lake yesterday with Ana, and we swam twice.",
              "assistant: That sounds lovely. Was the water cold?",
              "user: Freezing! Next Saturday we're going back with her kids."]
GIST_SAID_AT = ["2023-09-17T14:32:00+00:00", "2023-09-17T14:33:00+00:00",
                "2023-09-17T14:35:00+00:00"]


@pytest.mark.parametrize("gist", [
    "On Sunday 17 September 2023, Sam told Wren about his trip to the lake with Ana.",
    "At 2:32 pm on 17 September 2023 Sam said he had swum in the lake with Ana.",
    "Sam went to the lake with Ana on 16 September 2023 and swam twice.",
    "Sam plans to go back to the lake with Ana's kids on 23 September 2023.",
])
def test_a_gist_may_say_when_its_session_was(gist: str) -> None:
    """The summarize request shows when its turns were said, so that a gist may say it
    and make the turns' relative dates absolute: neither is made up (on c5757a7, 58 of
    the dev slice's 70 capable gists were refused for naming their session's date)."""
    prompt = summary_prompt({"user": "Sam", "agent": "Wren"}, None, GIST_TURNS, 8,
                            said_at=GIST_SAID_AT)
    assert "Sunday 17 September 2023" in prompt.user
    assert ungrounded(gist, source_of(prompt)) == []
    assert ungrounded("Sam went to the lake on 5 September 2023.", source_of(prompt)) \
        == ["5"]


def test_a_session_over_two_days_shows_each_day() -> None:
    said_at = [*GIST_SAID_AT[:2], "2023-09-18T08:05:00+00:00"]
    prompt = summary_prompt({"user": "Sam", "agent": "Wren"}, None, GIST_TURNS, 8,
                            said_at=said_at)
    assert prompt.user.index("Sunday 17 September 2023") < prompt.user.index("lake") < \
        prompt.user.index("Monday 18 September 2023") < prompt.user.index("Freezing")
    # "Next Saturday", said on the Monday: 23 September.
    assert ungrounded("Sam goes back on 23 September.", source_of(prompt)) == []


def test_a_gist_naming_its_sessions_day_is_kept_first_time(tmp_path: Path) -> None:
    """Through a pass: the session's turns were said on T0's day, and the model's gist
    says so; it is stored as the model wrote it, with one request."""
    answers, tasks, _ = summarize_pass(
        tmp_path, f"say:On {long_date(T0.date())} the user talked about hiking in the "
        "mountains with a sister, going over the details one at a time.")
    assert tasks.count("summarize") == 1
    assert answers == {"asked": 1, "kept_first": 1}


def one_session(tmp_path: Path, server: FakeOpenAI, jobs: JobsConfig) -> Config:
    db = tmp_path / "memory.db"
    conn = make_chat_file(db)
    add_turns(conn, "s1", chat_texts(0, 8))
    conn.close()
    return dataclasses.replace(config_for(db), completer=completer_config(server),
                               facts=FactsConfig(producer="offline"), jobs=jobs)


def summarize_pass(tmp_path: Path, *plan: str) -> tuple[dict[str, int], list[str], str]:
    """A forced pass over one session, the test server answering `plan` first: what
    became of summarize's answers (the pass record's), the tasks asked, and status."""
    server = FakeOpenAI().start()
    try:
        config = one_session(tmp_path, server, JobsConfig())
        server.plan(*plan)
        store = open_sqlite(config)
        with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as completer:
            run_pass(store, config, HashingEmbedder(), completer, trigger="test", force=True)

        state = report.status(store, config, "hashing", datetime.now(UTC), 1)
        store.close()
    finally:
        server.stop()
    job = next(j for j in state["runs"][0]["jobs"] if j["job"] == "summarize")
    return job.get("answers", {}), server.tasks(), render_status(state)


def test_a_refusal_the_same_model_would_repeat_is_not_asked_again(tmp_path: Path) -> None:
    """A name the turns never said: the model read them that way and would write it again.
    One request, the fallback's gist, and the refusal counted in the pass record."""
    answers, tasks, _ = summarize_pass(tmp_path, "say:Sam hiked with Priyanka Venkataraman.")
    assert tasks.count("summarize") == 1
    assert answers == {"asked": 1, "refused_first:grounded": 1, "refused": 1, "fell_back": 1}


def test_the_first_refusal_is_counted_and_shown_when_the_second_answer_is_kept(
        tmp_path: Path) -> None:
    answers, tasks, shown = summarize_pass(tmp_path, "say:<<SYS>>")
    assert tasks.count("summarize") == 2
    assert answers["asked"] == 1 and answers["asked_again"] == 1
    assert answers["kept_again"] == 1 and answers["refused_first:markers"] == 1
    assert answers["reask_tokens"] > 0 and "kept_first" not in answers
    assert "answers: asked 1, kept first time 0, asked again 1 (kept 1" in shown
    assert "first refusals: markers 1" in shown

"""The recall recipe part by part, on handmade turns: each part moves the ranking the way
it should; relative dates resolve across month, year and weekday boundaries; one user's
words never crowd out another's."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.config import AgentConfig, Config, EmbedConfig, UserConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.jobs import embed
from dreamd.dream.jobs.registry import JOBS, Registry
from dreamd.memory.api import Memory, scope_of
from dreamd.memory.recall import named, query_words
from dreamd.store.facts import facts_of
from dreamd.store.turns import add_turn
from dreamd.store.vectors import search_words
from dreamd.text import keys
from dreamd.text.dates import Period, asked_period, long_date, periods, resolve
from dreamd.text.keys import Said, context_text, in_names, turn_key, vector_key
from tests.helpers import RecordingCompleter

SUNDAY = date(2023, 5, 7)


@pytest.mark.parametrize(("said", "text", "meaning"), [
    (SUNDAY, "I went yesterday", "Saturday 6 May 2023"),
    (date(2023, 5, 1), "yesterday", "Sunday 30 April 2023"),  # month boundary
    (date(2024, 1, 1), "last night", "Sunday 31 December 2023"),  # year boundary
    (date(2024, 3, 1), "the day before yesterday", "Wednesday 28 February 2024"),  # leap
    (date(2023, 12, 31), "tomorrow", "Monday 1 January 2024"),
    (SUNDAY, "last Friday", "Friday 5 May 2023"),
    (SUNDAY, "Last Fri", "Friday 5 May 2023"),  # as people shorten it
    (SUNDAY, "this Thurs", "Thursday 11 May 2023"),
    (SUNDAY, "last Sunday", "Sunday 30 April 2023"),  # never the day itself
    (SUNDAY, "next Monday", "Monday 8 May 2023"),
    (date(2023, 12, 29), "next Tuesday", "Tuesday 2 January 2024"),
    (SUNDAY, "3 days ago", "Thursday 4 May 2023"),
    (SUNDAY, "two weeks ago", "the week of Sunday 23 April 2023"),
    (SUNDAY, "last week", "the week before Sunday 7 May 2023"),
    (SUNDAY, "last weekend", "the weekend of Saturday 6 May 2023"),
    (date(2023, 5, 10), "two weekends ago", "the weekend of Saturday 29 April 2023"),
    (date(2023, 1, 15), "last month", "December 2022"),
    (date(2023, 12, 15), "next month", "January 2024"),
    (SUNDAY, "a few months ago", "February 2023"),
    (SUNDAY, "last year", "2022"),
    (SUNDAY, "in two weeks", "the week of Sunday 21 May 2023"),
])
def test_relative_dates_resolve_against_the_day_said(said: date, text: str,
                                                     meaning: str) -> None:
    assert resolve(text, said).endswith(f"({meaning})")


@pytest.mark.parametrize("text", ["I last sat there in May", "we lay on sun loungers",
                                  "this sun is too hot"])
def test_words_that_are_also_short_weekdays_are_left_as_they_are(text: str) -> None:
    assert resolve(text, SUNDAY) == text


@pytest.mark.parametrize("text", ["I teach pottery on Tuesday evenings.",
                                  "We play darts on Friday nights at the Crown.",
                                  "On Sunday mornings I swim in the lido."])
def test_a_weekday_s_mornings_or_nights_are_a_habit_and_no_one_day(text: str) -> None:
    """"on Tuesday evenings" is every Tuesday: no date is written after it."""
    assert resolve(text, SUNDAY) == text
    assert resolve("I teach pottery on Tuesday.", SUNDAY).endswith("(Tuesday 9 May 2023).")


@pytest.mark.parametrize(("question", "first", "last"), [
    ("What did Maria plan on the evening of 7 July, 2023?", date(2023, 7, 7), date(2023, 7, 7)),
    ("What did Melanie show Caroline on October 13, 2023?", date(2023, 10, 13),
     date(2023, 10, 13)),
    ("What did John do the week before August 3, 2023?", date(2023, 8, 3), date(2023, 8, 3)),
    ("What is John doing as a volunteer in August 2023?", date(2023, 8, 1),
     date(2023, 8, 31)),
    ("What happened in February 2024?", date(2024, 2, 1), date(2024, 2, 29)),  # leap year
    ("How often did she go to the beach in 2023?", date(2023, 1, 1), date(2023, 12, 31)),
    ("What did I tell you yesterday?", date(2023, 4, 30), date(2023, 4, 30)),  # month
    ("What did we talk about last week?", date(2023, 4, 24), date(2023, 4, 30)),
    ("What did I say last month?", date(2023, 4, 1), date(2023, 4, 30)),
    ("What did I buy last Friday?", date(2023, 4, 28), date(2023, 4, 28)),
])
def test_the_period_a_question_asks_about(question: str, first: date, last: date) -> None:
    """Dates in the question first; else relative ones, counted from today (here Monday
    1 May 2023)."""
    assert asked_period(question, date(2023, 5, 1)) == Period(first, last)


def test_a_month_without_its_year_is_that_month_any_year() -> None:
    june = asked_period("When did Melanie go camping in June?", SUNDAY)
    assert june is not None and june.every_year
    assert june.holds(date(2021, 6, 30)) and june.holds(date(2023, 6, 1))
    assert not june.holds(date(2023, 7, 1))
    assert june.meets(Period(date(2023, 6, 26), date(2023, 7, 2)))  # the week before 3 July
    assert not june.meets(Period(date(2023, 7, 3), date(2023, 7, 9)))
    for question in ("May I ask what you did?", "What did Ana say about 31 February 2023?",
                     "Call me at 2023 Main Street"):
        assert asked_period(question, SUNDAY) is None, question
    assert periods("Sam went last week (the week before Monday 3 July 2023) and again "
                   "yesterday (Sunday 2 July 2023)") == [
        Period(date(2023, 6, 26), date(2023, 7, 2)), Period(date(2023, 7, 2), date(2023, 7, 2))]


def test_text_without_relative_dates_is_untouched() -> None:
    text = "Mondays are fine; I like May and the weekday rhythm"
    assert resolve(text, SUNDAY) == text
    # A figure of speech is not a date.
    for idiom in ("Time flies, feels like just yesterday I put this dress on!",
                  "I remember it as if it was yesterday.", "It seems like only yesterday."):
        assert resolve(idiom, SUNDAY) == idiom
    assert long_date(SUNDAY) == "Sunday 7 May 2023"


def test_the_key_says_who_spoke_to_whom_and_when() -> None:
    said = Said("Caroline", "I went to my support group yesterday, you'd love it",
                "2023-05-07T13:56:00+00:00", "Melanie")
    assert turn_key(said) == ("Sunday 7 May 2023. Caroline (to Melanie): Caroline went to "
                              "Caroline's support group yesterday (Saturday 6 May 2023), "
                              "Melanie would love it")
    assert in_names("Are you OK? I am.", "ana", None) == "Are you OK? ana am."
    text = context_text(said, Said("Melanie", "How was your week?", said.created_at,
                                   "Caroline"), None)
    assert text.splitlines()[1] == "Melanie: How was Caroline's week?"


def test_a_pasted_page_is_indexed_whole_but_not_carried_whole_into_other_keys() -> None:
    """Every word of a 1 MB turn is in its own words entry; its neighbours' entries and its
    vector key take its first few thousand characters (no embedder reads further)."""
    page = "I keep notes about my garden and " * 30_000
    pasted = Said("ana", page + "the last word is zucchini", "2023-05-07T13:56:00+00:00")
    after = Said("bot", "That is a long page.", pasted.created_at, "ana")
    assert "zucchini" in context_text(pasted, None, after)
    neighbour = context_text(after, pasted, None)
    assert len(neighbour) < 5_000 and neighbour.splitlines()[1].startswith("ana: ana keep notes")
    key = vector_key(pasted)
    assert 8_000 <= len(key) < 10_000 and "zucchini" not in key


def test_query_words_are_unicode() -> None:
    assert query_words("Zoë … Malmö, café München") == ["zoë", "malmö", "café", "münchen"]
    assert named("What is Caroline's job? Did Zoë visit Malmö?") == ["Caroline", "Zoë",
                                                                      "Malmö"]


T0 = datetime(2023, 5, 7, 13, 0, tzinfo=UTC)


def memory_of(db: Path, sessions: dict[str, list[tuple[str, str]]],
              users: dict[str, str] | None = None, jobs: Registry = JOBS,
              starts: dict[str, datetime] | None = None) -> Memory:
    """A file with these sessions of (speaker, text), a pass over it, a Memory on it.
    Sessions follow each other a minute a turn, or start when `starts` says."""
    embedder = HashingEmbedder()
    memory = Memory(db, config=Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)
    at = T0
    with memory.store.write() as conn:
        for session, turns in sessions.items():
            at = (starts or {}).get(session, at)
            for speaker, text in turns:
                add_turn(conn, session, speaker, text, at.isoformat())
                at += timedelta(minutes=1)
        for session, user in (users or {}).items():  # as the app files them
            conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                         "VALUES (?, ?, ?, ?)", (session, session, T0.isoformat(), user))
    run_pass(memory.store, memory.config, embedder, RecordingCompleter(memory.store, embedder),
             trigger="test", force=True, jobs=jobs)
    return memory


def test_a_pass_keeps_no_turns_words_once_it_has_indexed_them(tmp_path: Path) -> None:
    """The rewritten words kept while a pass indexes turns (each is a neighbour twice)
    are dropped when the embed job ends: nothing of a turn stays in the process."""
    memory = memory_of(tmp_path / "m.db", {"s": [
        ("ana", "I moved to Lisbon last year"), ("ben", "How do you like it?"),
        ("ana", "I love the light there")]})
    try:
        with memory.store.read() as conn:
            assert 1 in search_words(conn, ["lisbon"], 5)  # it was indexed
        assert keys._rewritten.cache_info().currsize == 0
        # Nor does a key made outside the embed job (a server embedding a turn) keep any.
        assert vector_key(Said("ana", "I love it", "2023-05-07T13:56:00+00:00"))
        assert keys._rewritten.cache_info().currsize == 0
    finally:
        memory.close()


def ranked(memory: Memory, query: str, **kw: object) -> list[str]:
    return [h.content for h in memory.recall(query, k=10, **kw)]


def test_the_speaker_in_the_key_finds_whose_turn_it_is(tmp_path: Path) -> None:
    memory = memory_of(tmp_path / "m.db", {"s": [
        ("ben", "I really love spicy ramen"), ("ana", "I really love spicy ramen too"),
        ("ben", "Noted"), ("ana", "Good")]})
    # Lower case: no name for the entity boost to see; the key alone tells them apart.
    assert ranked(memory, "what food does ana love", words_too=False)[0].endswith("too")
    assert ranked(memory, "what food does ben love", words_too=False)[0].endswith("ramen")
    memory.close()


def test_the_context_finds_an_answer_that_never_names_its_topic(tmp_path: Path) -> None:
    memory = memory_of(tmp_path / "m.db", {
        "hike": [("ana", "Which trail is your favourite hike?"),
                 ("ben", "Definitely the ridge above the lake"), ("ana", "Nice")],
        "other": [("ben", "Definitely the blue one, above all"), ("ana", "Fine")]})
    best = ranked(memory, "favourite hike trail")[:2]
    assert "Definitely the ridge above the lake" in best
    assert "Definitely the blue one, above all" not in best
    memory.close()


def test_the_session_signal_lifts_turns_of_the_session_about_it(tmp_path: Path) -> None:
    memory = memory_of(tmp_path / "m.db", {
        "garden": [("ana", "tomatoes basil compost garden beds"),
                   ("ana", "garden compost tomatoes basil"),
                   ("ana", "it is all done now")],
        "chores": [("ana", "it is all done now"), ("ana", "laundry dishes vacuum")]})
    hits = memory.recall("garden compost tomatoes basil done", k=5, words_too=False)
    done = [h.session_id for h in hits if h.content == "it is all done now"]
    assert done[:2] == ["garden", "chores"]
    memory.close()


def test_a_named_person_lifts_their_turns_and_turns_about_them(tmp_path: Path) -> None:
    memory = memory_of(tmp_path / "m.db", {"s": [
        ("Ana", "I cooked a mushroom risotto"), ("Ben", "I cooked a mushroom risotto"),
        ("Carl", "Dora cooked a mushroom risotto"), ("Ana", "Eli cooked a mushroom risotto")]})
    assert memory.recall("What did Ben cook?", k=1)[0].role == "Ben"
    assert memory.recall("What did Ana cook?", k=1)[0].role == "Ana"
    assert ranked(memory, "What did Dora cook?")[0].startswith("Dora")
    memory.close()


def test_recall_and_context_carry_absolute_dates(tmp_path: Path) -> None:
    memory = memory_of(tmp_path / "m.db", {"s": [
        ("Caroline", "I went to the LGBTQ support group yesterday"),
        ("Melanie", "How did it go?")]})
    [hit] = [h for h in memory.recall("When did Caroline go to the support group?", k=2)
             if h.role == "Caroline"]
    assert hit.when == "Sunday 7 May 2023"
    assert hit.dated.endswith("yesterday (Saturday 6 May 2023)")
    block = memory.context("later", query="When did Caroline go to the support group?")
    assert "[Sunday 7 May 2023] Caroline: I went to the LGBTQ support group yesterday " \
           "(Saturday 6 May 2023)" in block.text
    memory.close()


def test_another_users_words_never_crowd_a_user_out(tmp_path: Path) -> None:
    crowd = {f"b{i}": [("user", f"saxophone practice {i} saxophone reeds saxophone")]
             for i in range(300)}
    memory = memory_of(tmp_path / "m.db", {"a1": [("user", "I started saxophone lessons")],
                                           **crowd},
                       users={"a1": "alice", **{s: "bob" for s in crowd}})
    with memory.store.read() as conn:
        [alice] = search_words(conn, ["saxophone"], 5, ["alice"])
        bobs = search_words(conn, ["saxophone"], 5, ["bob"])
    assert len(bobs) == 5 and alice not in bobs
    assert [h.content for h in memory.recall("saxophone", k=3, users=["alice"])] == [
        "I started saxophone lessons"]
    # Alice's matrix holds Alice's turns only.
    assert memory.indexes.of(scope_of(["alice"])).ids.tolist() == [alice]
    memory.close()


def test_a_session_that_changes_hands_moves_to_its_new_owners_recall(tmp_path: Path) -> None:
    """Embedded but not summarized yet: no gist is dropped by the move, and the new
    owner's matrix must still learn of the session's turns."""
    only_embed = Registry((embed.SPEC,))
    memory = memory_of(tmp_path / "m.db", {"a1": [("user", "I started saxophone lessons")],
                                           "b1": [("user", "I play the cello")]},
                       users={"a1": "alice", "b1": "bob"}, jobs=only_embed)
    assert [h.session_id for h in memory.recall("saxophone", k=5, users=["alice"])] == ["a1"]
    assert "a1" not in {h.session_id for h in memory.recall("saxophone", k=5, users=["bob"])}
    with memory.store.write() as conn:  # the app files the session under bob now
        conn.execute("UPDATE sessions SET user_id = 'bob' WHERE id = 'a1'")
    completer = RecordingCompleter(memory.store)  # the same hashing model as the memory's
    run_pass(memory.store, memory.config, completer.embedder, completer, trigger="test",
             force=True, jobs=only_embed)
    for words in (True, False):  # the words side, and bob's matrix on its own
        moved = memory.recall("saxophone", k=5, users=["bob"], words_too=words)
        assert "a1" in {h.session_id for h in moved}
        assert memory.recall("saxophone", k=5, users=["alice"], words_too=words) == []
    memory.close()


def test_a_question_in_the_first_person_is_asked_about_its_user(tmp_path: Path) -> None:
    """Turns are keyed with names for pronouns; so is the query: "my" is the user's name,
    "you" the agent's. Whose dog is asked about decides which turn answers."""
    memory = memory_of(tmp_path / "m.db", {
        "mine": [("user", "My dog is called Biscuit."), ("assistant", "Lovely.")],
        "yours": [("user", "Tell me a story."), ("assistant", "My dog is called Rex.")]})
    assert memory.as_keyed("What is my dog called?", ["default"]) == "What is user's dog called?"
    assert memory.as_keyed("And yours?", ["default"]) == "And assistant's?"
    assert memory.as_named("What is my dog called?", ["default"]) == \
        "What is the user's dog called?"
    for words_too in (True, False):
        assert ranked(memory, "What is my dog called?", words_too=words_too)[0] == \
            "My dog is called Biscuit.", words_too
        assert ranked(memory, "What is your dog called?", words_too=words_too)[0] == \
            "My dog is called Rex.", words_too
    memory.close()


def test_the_user_s_own_name_in_a_first_person_question_finds_their_news(
        tmp_path: Path) -> None:
    """With the user's name configured ("Sam"), "my manager" is asked in the words turns
    are keyed in (the user's role), not as "Sam's manager", which would find every turn
    that greets Sam by name; facts still meet the question by name."""
    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"),
                    user=UserConfig(name="Sam"), agent=AgentConfig(id="wren", name="Wren"))
    memory = Memory(db, config=config, embedder=HashingEmbedder())
    with memory.store.write() as conn:
        for n, (role, text) in enumerate([
                ("user", "Hi! I'm Sam, I just started a new job."),
                ("assistant", "Welcome, Sam! How is the new job, Sam?"),
                ("user", "Good. My manager is Rui, he is kind."),
                ("assistant", "Lucky you.")]):
            add_turn(conn, "s", role, text, (T0 + timedelta(minutes=n)).isoformat())
    run_pass(memory.store, memory.config, memory.embedder, RecordingCompleter(memory.store),
             trigger="test", force=True)
    assert memory.as_keyed("Who is my manager?", ["default"]) == "Who is user's manager?"
    assert memory.as_named("Who is my manager?", ["default"]) == "Who is Sam's manager?"
    assert ranked(memory, "Who is my manager?")[0] == "Good. My manager is Rui, he is kind."
    memory.close()


def test_a_fact_lifts_the_turn_it_came_from(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A fact is its turn's news said plainly: a question that meets the fact finds the
    turn, even where the turn buries it among other words."""
    from dreamd.memory import recall

    memory = memory_of(tmp_path / "m.db", {
        "day": [("ana", "Long day at work, meetings all morning and the printer jammed "
                        "twice before lunch, then the train home was late, the station "
                        "was packed and my phone died. Anyway I adopted a puppy called Nora."),
                ("assistant", "Congratulations!")],
        "park": [("ana", "Tell me about dogs."),
                 ("assistant", "A puppy called Rex was adopted at the park, a puppy called "
                               "Max.")]})
    query = "ana adopted a puppy called Nora"
    with memory.store.read() as conn:
        facts = [f.statement for f in facts_of(conn, "default")]
    assert any("adopted a puppy called Nora" in f for f in facts), facts
    assert ranked(memory, query, words_too=False)[0].startswith("Long day")
    monkeypatch.setattr(recall, "FACT_WEIGHT", 0.0)  # the same recall without facts
    assert ranked(memory, query, words_too=False)[0].startswith("A puppy called Rex")
    memory.close()


def test_a_fact_said_again_later_lifts_the_later_turn_too(tmp_path: Path) -> None:
    """A Memory that has read the facts sees a known fact's new source turn at its next
    recall (the facts job adds the turn to the fact; no new fact is made)."""
    memory = memory_of(tmp_path / "m.db", {
        "s1": [("ana", "I adopted a puppy called Nora."), ("assistant", "Congratulations!")]})
    index = memory.indexes.facts("default")
    index.refresh()
    assert len(index.turns) == 1
    with memory.store.write() as conn:
        later = add_turn(conn, "s2", "ana", "I adopted a puppy called Nora.",
                           (T0 + timedelta(days=3)).isoformat())
    run_pass(memory.store, memory.config, memory.embedder,
             RecordingCompleter(memory.store), trigger="test", force=True)
    with memory.store.read() as conn:
        facts = facts_of(conn, "default")
    assert len(facts) == 1 and later in facts[0].sources, facts  # the same fact, said again
    memory.recall("puppy Nora", k=3)
    assert later in index.turns.tolist() and len(index.turns) == 2
    memory.close()


def test_a_recall_with_no_new_fact_walks_none_of_the_users_facts(tmp_path: Path) -> None:
    """Between passes, each recall looks for facts and sources newer than its index holds:
    the look seeks by a key (the sources by their turn, the user's facts by id), never
    walks the user's facts (at 66,666 facts a user that walk took longer than the
    product over them). A fact a later pass writes is still taken up."""
    import re
    import sqlite3

    memory = memory_of(tmp_path / "m.db", {
        "s1": [("ana", "I adopted a puppy called Nora."), ("assistant", "Congratulations!")],
        "s2": [("ana", "I moved to Porto in May."), ("assistant", "How exciting!")]})
    index = memory.indexes.facts("default")
    index.refresh()
    held = len(index.turns)
    assert held
    raw: sqlite3.Connection = memory.store.conn  # type: ignore[attr-defined]
    with sqlite3.connect(tmp_path / "m.db") as app:  # something new, but no fact
        app.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                    "VALUES ('s3', 'user', 'Morning!', ?)", (T0.isoformat(),))
    app.close()
    ran: list[str] = []
    raw.set_trace_callback(ran.append)
    index.refresh()
    raw.set_trace_callback(None)
    reads = [sql for sql in ran if re.search(r"\bfacts\b|\bdreamd_fact_sources\b", sql)]
    assert reads, ran
    walks = [(sql, step) for sql in reads
             for step in (row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}"))
             if re.search(r"\bSCAN\b|dreamd_facts_user\b|fact_id<", step)]
    assert walks == []
    with memory.store.write() as conn:
        add_turn(conn, "s3", "ana", "I started learning the cello.",
                 (T0 + timedelta(days=3)).isoformat())
    run_pass(memory.store, memory.config, memory.embedder,
             RecordingCompleter(memory.store), trigger="test", force=True)
    index.refresh()
    assert len(index.turns) > held
    memory.close()


def test_a_date_in_the_question_lifts_what_was_said_then(tmp_path: Path) -> None:
    """The same words said on two days: the question's date picks the day ("on 7 July,
    2023", "in June"), and so does a turn that names a day within it."""
    memory = memory_of(tmp_path / "m.db", {
        "june": [("Ana", "I cooked a mushroom risotto for my friends"), ("Ben", "Yum")],
        "july": [("Ana", "I cooked a mushroom risotto for my friends"), ("Ben", "Yum")],
        "later": [("Ana", "I cooked a mushroom risotto for my friends two days ago"),
                  ("Ben", "Yum")]},
        starts={"june": datetime(2023, 6, 3, 12, tzinfo=UTC),
                "july": datetime(2023, 7, 7, 12, tzinfo=UTC),
                "later": datetime(2023, 8, 16, 12, tzinfo=UTC)})
    for question, session in (("What did Ana cook on 7 July, 2023?", "july"),
                              ("What did Ana cook on 3 June 2023?", "june"),
                              ("What did Ana cook in June?", "june"),
                              ("What did Ana cook on 14 August 2023?", "later")):
        assert memory.recall(question, k=1)[0].session_id == session, question
    memory.close()


def test_what_was_said_yesterday_is_found_though_the_question_names_no_topic(
        tmp_path: Path) -> None:
    """"What did I tell you yesterday?" matches no turn's words; the day is the topic.
    Yesterday's turn ranks first among 300 older ones that share the question's words,
    more than the vector and word sides each bring in."""
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    sessions = {f"old{n}": [("ana", f"Let me tell you what I did, number {n}")]
                for n in range(300)}
    sessions["yesterday"] = [("ana", "I painted the garden fence blue")]
    starts = {f"old{n}": today - timedelta(days=400 - n) for n in range(300)}
    starts["yesterday"] = today - timedelta(days=1)
    memory = memory_of(tmp_path / "m.db", sessions, starts=starts)
    assert memory.recall("What did I tell you yesterday?", k=1)[0].session_id == "yesterday"
    assert memory.recall("What did I tell you?", k=5)[0].session_id != "yesterday"
    memory.close()


def test_a_fact_read_before_its_vector_counts_once_the_vector_is_stored(
        tmp_path: Path) -> None:
    """A pass writes a fact, then embeds it: a Memory that refreshes in between reads the
    fact without a vector, and must take it up once the vector is there."""
    memory = memory_of(tmp_path / "m.db", {
        "s1": [("ana", "I adopted a puppy called Nora."), ("assistant", "Congratulations!")]})
    with memory.store.write() as conn:
        saved = conn.execute("SELECT model, kind, key, vector FROM dreamd_vectors "
                             "WHERE kind = 'fact'").fetchall()
        assert saved
        conn.execute("DELETE FROM dreamd_vectors WHERE kind = 'fact'")
    index = memory.indexes.facts("default")
    index.refresh()
    assert len(index.turns) == 0  # the fact is there, its vector not yet
    with memory.store.write() as conn:
        conn.executemany("INSERT INTO dreamd_vectors (model, kind, key, vector) "
                         "VALUES (?, ?, ?, ?)", saved)
    index.refresh()
    assert len(index.turns) == 1
    memory.close()


def test_a_refresh_with_nothing_committed_since_reads_nothing(tmp_path: Path) -> None:
    """Each query refreshes the indexes; with nothing committed to the file since their
    last refresh, by dreamd or any other process, a refresh reads nothing but SQLite's
    data version. A pass run by another process is taken up at the next query."""
    import sqlite3
    import subprocess
    import sys

    from tests.helpers import dreamd_env

    db = tmp_path / "m.db"
    memory = memory_of(db, {
        "s1": [("ana", "I adopted a puppy called Nora."), ("assistant", "Congratulations!")]})
    turns = memory.indexes.of(scope_of(["default"]))
    facts = memory.indexes.facts("default")
    gists = memory.indexes.gists("default")
    for index in (turns, facts, gists):
        index.refresh()
    held = (len(turns.base_ids), len(facts.turns))
    raw: sqlite3.Connection = memory.store.conn  # type: ignore[attr-defined]
    ran: list[str] = []
    raw.set_trace_callback(ran.append)
    for index in (turns, facts, gists):
        index.refresh()
    raw.set_trace_callback(None)
    assert ran == ["PRAGMA data_version"] * 3, ran
    with sqlite3.connect(db) as app:  # the app's turn, then dreamd's pass elsewhere
        app.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                    "VALUES ('s2', 'user', 'I moved to Porto in May.', ?)",
                    ((T0 + timedelta(days=2)).isoformat(),))
    app.close()
    done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                          env=dreamd_env(DREAMD_EMBED__BACKEND="hashing"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    turns.refresh()
    facts.refresh()
    assert len(turns.base_ids) > held[0] and len(facts.turns) > held[1]
    memory.close()

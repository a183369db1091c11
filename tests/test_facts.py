"""The facts tier: what is kept and dropped, facts replaced by newer ones, forget, bounds,
and the profile a person would call useful on the shipped sample conversations."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dreamd.cli.demo import parse_samples, sample_sessions, write_sessions
from dreamd.config import Config, EmbedConfig, JobsConfig, UserConfig
from dreamd.dream.cycle import run_pass
from dreamd.ids import narrative_id, profile_id
from dreamd.memory.forget import Scope, forget
from dreamd.models import Fact
from dreamd.store import runs
from dreamd.store.facts import facts_of
from dreamd.store.pending import count_unread
from dreamd.store.tiers import narrative_row, profile_row
from dreamd.text.facts import MAX_CHARS, extract
from dreamd.text.from_facts import profile_from
from testkit.remembered import SAM, from_file, judged
from tests.helpers import RecordingCompleter, add_turns, kept, make_chat_file, open_sqlite

SAID = "2026-07-12T20:15:00+00:00"  # a Sunday


@pytest.mark.parametrize(("text", "before", "stored"), [
    ("I adopted a dog today, her name is Biscuit.", "", "Sam adopted a dog today"),
    ("I work as a backend developer at a small startup.", "",
     "Sam works as a backend developer"),
    ("My sister Ana lives in Manchester.", "", "Sam's sister Ana lives in Manchester"),
    ("Moved into the new flat on Saturday.", "How was it?",
     "Sam moved into the new flat on Saturday (Saturday 11 July 2026)"),
    ("I moved here last week.", "", "Sam moved here last week (the week before Sunday 12 July"),
    ("Actually my manager Rui said dogs are welcome on Fridays.", "",
     "Sam's manager Rui said dogs are welcome on Fridays"),  # a person introduced by name
    ("Yes please, maybe next time.", "", None),
    ("Tonight I'm just tired and want to unpack.", "", None),
    ("How is Biscuit settling in?", "", None),
    ("Thanks, that sounds good!", "", None),
    ("Exhausted and a bit embarrassed, honestly.", "", None),
])
def test_sentences_that_carry_information_are_kept(minilm: Any, text: str, before: str,
                                                   stored: str | None) -> None:
    facts = kept(minilm, "Sam", text, "Wren", before, said_at=SAID)
    if stored is None:
        assert facts == []
    else:
        assert len(facts) == 1 and facts[0].startswith(stored), facts


@pytest.mark.parametrize(("text", "before", "statement"), [
    # The person named just before, in the same turn or the one before, is the subject.
    ("Ana says the same. She is running the half too, she's flying in from Manchester.",
     "Try electrolytes on long runs.", 'Sam: "Ana is running the half too'),
    ("She moved to Porto in May with Rui.", "How is your sister Ana doing?",
     'Sam: "Ana moved to Porto in May with Rui'),
    # Nobody named, or two people: no guess.
    ("She moved to Porto in May.", "Did Ana and Rui visit you?", 'Sam: "She moved to Porto'),
    ("She moved to Porto in May.", "Is she settled?", 'Sam: "She moved to Porto'),
])
def test_a_she_or_he_is_named_only_when_one_person_was_just_named(
        text: str, before: str, statement: str) -> None:
    facts = [f for f in extract("Sam", text, SAID, "Wren", before) if "Porto" in f.statement
             or "half" in f.statement]
    assert [f.statement[:len(statement)] for f in facts] == [statement], facts
    # Whoever moved, it was not Sam: nothing here replaces where Sam lives.
    assert all(f.about is None for f in facts), facts


@pytest.mark.parametrize(("text", "before", "statements"), [
    # "her" and "him" with no noun after them are the person; "her"/"his" before a noun
    # are the person's, unless the sentence named its own owner first.
    ("Ana lands on the 16th. I'm showing her Belém and the new flat from outside.", "",
     ['Sam: "Ana lands on the 16th."', "Sam is showing Ana Belém and the new flat from outside."]),
    ("Much faster, she ran a marathon last year in 3 hours 40.", "Ana says the same.",
     ['Sam: "Ana ran a marathon last year (2025) in 3 hours 40."']),
    ("She's flying in from Manchester to see her mum in May.", "My sister Ana called.",
     ['Sam: "Ana is flying in from Manchester to see her mum in May."']),
    ("My mum had her knee replaced.", "Ana called.", ["Sam's mum had her knee replaced."]),
    # Nobody named just before: the pronoun stays.
    ("I'm showing her Belém and the river.", "How was the flight?",
     ["Sam is showing her Belém and the river."]),
])
def test_a_pronoun_inside_a_sentence_is_named_like_one_that_opens_it(
        text: str, before: str, statements: list[str]) -> None:
    facts = extract("Sam", text, SAID, "Wren", before)
    assert [f.statement for f in facts] == statements


def test_an_era_leaves_out_lines_that_point_back_at_their_conversation() -> None:
    from dreamd.text.from_facts import era_from

    said = "2026-08-03T21:10:00+00:00"
    facts = [Fact(1, "u", "Sam", None, "Our main database went down during a release and "
                  "Sam was the one on call.", None, said),
             Fact(2, "u", "Sam", None, "Sam wrote it and Rui reviewed it, but we both missed "
                  "that it rewrites the whole table.", None, said),
             Fact(3, "u", "Sam", None, "Sam asked each of them to write one page.", None, said),
             Fact(4, "u", "Sam", "half marathon", "Sam ran it in 1 hour 57 minutes.", None, said),
             Fact(5, "u", "Sam", None, "He ate Sam's sandcastle bucket.", None, said),
             Fact(6, "u", "Sam", None, "It's cheaper than the old one and closer to the "
                  "station, Sam says.", None, said)]
    assert era_from(facts, "2026-08", 10).splitlines() == [  # a thing held at a time first
        "- 3 Aug: Sam ran it in 1 hour 57 minutes.",
        "- 3 Aug: Our main database went down during a release and Sam was the one on call."]


def test_a_sentence_without_its_subject_is_the_speaker_s_own_news() -> None:
    """"Moved into the new flat on Saturday" is the speaker's move: about their home."""
    facts = extract("Sam", "Moved into the new flat on Saturday.", SAID, "Wren", "How was it?")
    assert [(f.statement[:27], f.about) for f in facts] == [("Sam moved into the new flat",
                                                             "home")]


def test_a_fact_is_bounded_whatever_the_input() -> None:
    facts = extract("Sam", "I moved to Lisbon " + "and Porto " * 5000 + ".", SAID, None)
    assert all(len(f.statement) <= MAX_CHARS for f in facts)
    many = [Fact(i, "u", "Sam", None, f"Sam adopted cat number {i}", "2026-01-01", SAID)
            for i in range(500)]
    assert len(profile_from(many, 20).splitlines()) <= 20 + 8  # facts and topic headings


T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def pass_over(db: Path, config: Config) -> None:
    store = open_sqlite(config)
    completer = RecordingCompleter(store)
    run_pass(store, config, completer.embedder, completer, trigger="test", force=True)
    store.close()


def facts_in(db: Path, config: Config) -> list[Fact]:
    store = open_sqlite(config)
    with store.read() as conn:
        facts = facts_of(conn, "default")
    store.close()
    return facts


def test_a_newer_fact_replaces_the_older_one_about_the_same_thing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam"))
    app = make_chat_file(db)
    add_turns(app, "s1", ["I moved to Porto for university.", "Nice!",
                          "I work as a barista at a cafe near the river.", "Cool."], start=T0)
    add_turns(app, "s2", ["I moved to Lisbon yesterday, finally!", "Welcome!",
                          "I started working as a nurse at Santa Maria hospital.", "Great."],
              start=T0 + timedelta(days=200))
    pass_over(db, config)
    facts = facts_in(db, config)

    def saying(words: str) -> Fact:
        return next(f for f in facts if words in f.statement)
    porto, lisbon = saying("Porto"), saying("Lisbon")
    assert "Porto" in porto.statement and porto.about == "home"
    assert porto.replaced_by == lisbon.id and lisbon.current
    assert porto.valid_to == lisbon.valid_from == (T0 + timedelta(days=199)).date().isoformat()
    barista, nurse = saying("barista"), saying("nurse")
    assert barista.replaced_by == nurse.id and nurse.current
    # The profile holds what is true now; the narrative says what changed.
    store = open_sqlite(config)
    with store.read() as conn:
        profile = profile_row(conn, profile_id("default"))
        narrative = narrative_row(conn, narrative_id("default"))
    store.close()
    assert profile is not None and narrative is not None
    assert "Lisbon" in profile.content and "Porto" not in profile.content
    assert "nurse" in profile.content and "barista" not in profile.content
    assert "(before: Sam moved to Porto" in narrative.content


def test_forget_erases_the_facts_of_its_turns_and_keeps_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam"))
    app = make_chat_file(db)
    add_turns(app, "old", ["I moved to Porto for university.", "Nice!"], start=T0)
    add_turns(app, "new", ["I moved to Lisbon yesterday, finally!", "Welcome!",
                           "My sister Ana plays the cello in an orchestra.", "Lovely."],
              start=T0 + timedelta(days=100))
    pass_over(db, config)
    assert len(facts_in(db, config)) == 3
    store = open_sqlite(config)
    forget(store, Scope("default", session="new"), config.agent.id)
    store.close()
    [left] = facts_in(db, config)
    assert "Porto" in left.statement and left.current  # what replaced it is gone


def sample_memory(tmp_path: Path, embedder: Any, sessions: list[Any], name: str
                  ) -> tuple[str, str]:
    """One offline pass over a sample, as `dreamd demo` runs it: (profile, narrative)."""
    from dreamd.dream.extractive import ExtractiveCompleter

    db = tmp_path / "m.db"
    config = Config(db=str(db), user=UserConfig(name=name))
    app = make_chat_file(db)
    write_sessions(app, sessions)
    app.close()
    store = open_sqlite(config)
    run_pass(store, config, embedder, ExtractiveCompleter(embedder), trigger="test", force=True)
    with store.read() as conn:
        profile = profile_row(conn, profile_id("default"))
        narrative = narrative_row(conn, narrative_id("default"))
    store.close()
    assert profile is not None and narrative is not None
    return profile.content, narrative.content


def test_the_demo_profile_is_what_a_friend_would_remember(tmp_path: Path, minilm: Any) -> None:
    profile, narrative = sample_memory(tmp_path, minilm, sample_sessions(), "Sam")
    # The narrative tells what changed lately: Sam's move into the new flat, the new role.
    changes = [ln for ln in narrative.splitlines() if ln.startswith(("- home:", "- job:"))]
    assert any(ln.startswith("- home: Sam moved into the new flat") for ln in changes), changes
    assert any(ln.startswith("- job:") and "tech lead" in ln for ln in changes), changes
    judge = judged(profile, SAM, minilm)
    print(judge.line("profile"))
    # A plan made in reply to advice ("Good idea, I'll ask Rui ...") reads as a plan to
    # the selector; a friend would let it pass. Nothing else on the never-list.
    assert set(judge.wrong) <= {"ask Rui if the company can help"}, judge.wrong
    assert judge.core >= 5, (judge.found, profile)
    assert judge.precision >= 0.6, profile


def test_a_terse_second_sample_gives_a_profile_a_friend_would_recognise(
        tmp_path: Path, minilm: Any) -> None:
    """Another person, another style (lower case, fragments, "lol"), never used to shape
    a rule: what a friend would keep, written with the conversation, against the profile."""
    data = Path(__file__).parent / "data"
    sessions = parse_samples((data / "second_sample.txt").read_text("utf-8"))
    profile, _ = sample_memory(tmp_path, minilm, sessions, "Jonah")
    judge = judged(profile, from_file(data / "second_sample_keep.txt", "Jonah"), minilm)
    print(judge.line("profile"))
    assert judge.lines >= 12, profile
    # "survived the party" is on the never-list; the selector reads it as news.
    assert set(judge.wrong) <= {"survived the party"}, judge.wrong
    assert judge.precision >= 0.5 and len(judge.found) >= 10, (judge.found, profile)


def test_the_offline_profile_weighs_facts_by_the_selectors_score(tmp_path: Path,
                                                                 minilm: Any) -> None:
    """The profile job reads each current fact's stored vector and ranks by the selector's
    score of it (and files it under the area it means): the profile a pass stores is the
    one those scores give."""
    from dreamd.dream import areas
    from dreamd.dream.selector import for_model

    data = Path(__file__).parent / "data"
    sessions = parse_samples((data / "second_sample.txt").read_text("utf-8"))
    profile, _ = sample_memory(tmp_path, minilm, sessions, "Jonah")
    config = Config(db=str(tmp_path / "m.db"), user=UserConfig(name="Jonah"))
    facts = facts_in(tmp_path / "m.db", config)
    current = [f for f in facts if f.current]
    selector = for_model(minilm.model)
    assert selector is not None
    vectors = minilm.embed([f.statement for f in current])
    scores = selector.scores(vectors)
    sureness = {f.id: float(p) for f, p in zip(current, scores, strict=True)}
    area_model = areas.for_model(minilm.model)
    assert area_model is not None
    meant = area_model.of({f.id: v for f, v in zip(current, vectors, strict=True)})
    by_score = profile_from(facts, config.profile.max_facts, listeners=(config.agent.name,),
                            sureness=sureness, areas=meant)
    assert profile == by_score
    assert profile != profile_from(facts, config.profile.max_facts,
                                   listeners=(config.agent.name,))


def test_the_context_block_shows_facts_with_their_dates_and_the_past_when_asked(
        tmp_path: Path) -> None:
    from dreamd.memory.api import Memory

    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam"))
    app = make_chat_file(db)
    add_turns(app, "s1", ["I moved to Porto for university.", "Nice!"], start=T0)
    add_turns(app, "s2", ["I moved to Lisbon yesterday, finally!", "Welcome!"],
              start=T0 + timedelta(days=200))
    pass_over(db, config)
    memory = Memory(db, config=config)
    now = dict(memory.context("s3", query="Where does Sam live?").sections)["facts"]
    assert now == ("Sam moved to Lisbon yesterday (Wednesday 16 September 2026), finally!",)
    then = dict(memory.context("s3", query="Where did Sam live before?").sections)["facts"]
    assert any(line.startswith("Sam moved to Porto") and "(no longer true since Wednesday "
               "16 September 2026)" in line for line in then)
    memory.close()


def test_with_an_llm_the_same_tier_is_filled_by_structured_extraction(tmp_path: Path) -> None:
    """The test server answers the facts schema deterministically; an invalid answer is
    repaired once; a fact the model says a new one replaces is marked replaced."""
    import dataclasses

    from dreamd.backends.openai_backend import OpenAICompleter
    from testkit.openai_server import FakeOpenAI
    from tests.helpers import KEY, completer_config

    server = FakeOpenAI().start()
    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam"))
    config = dataclasses.replace(config, completer=completer_config(server))
    app = make_chat_file(db)
    add_turns(app, "s1", ["I moved to Porto for university.", "Nice!"], start=T0)
    add_turns(app, "s2", ["I moved to Lisbon yesterday, finally!", "Welcome!"],
              start=T0 + timedelta(days=200))
    server.plan('say:{"facts": [{"subject": "Sam"}]}')  # the first facts answer: invalid
    store = open_sqlite(config)
    from dreamd.backends.hashing import HashingEmbedder
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    store.close()
    server.stop()
    assert result.outcome == "ok", result.jobs
    facts = facts_in(db, config)
    porto = next(f for f in facts if "Porto" in f.statement)
    lisbon = next(f for f in facts if "Lisbon" in f.statement)
    assert porto.replaced_by == lisbon.id and lisbon.current and lisbon.about == "home"
    assert server.tasks()[:2] == ["facts", "facts"]  # asked, and asked again once


def junk_twice(tmp_path: Path, jobs: JobsConfig) -> tuple[Config, Any]:
    """A file with one turn that says something, and the test server about to answer a
    facts request with junk twice: (config, server)."""
    from testkit.openai_server import FakeOpenAI
    from tests.helpers import completer_config

    server = FakeOpenAI(schema="ignore").start()  # no grammar: the junk comes through
    db = tmp_path / "m.db"
    config = dataclasses.replace(
        Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam")),
        completer=completer_config(server), jobs=jobs)
    app = make_chat_file(db)
    add_turns(app, "s1", ["I moved to Porto for university.", "Nice!"], start=T0)
    server.plan("say:not json at all", 'say:{"facts": [{"subject": "Sam", "turns": [999]}]}')
    return config, server


def test_junk_twice_gives_the_batch_offline_facts_marked_as_the_fallback(
        tmp_path: Path) -> None:
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.backends.openai_backend import OpenAICompleter
    from tests.helpers import KEY

    config, server = junk_twice(tmp_path, JobsConfig())
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    with store.read() as conn:
        origins = [r[0] for r in conn.execute("SELECT origin FROM facts")]
        unread = count_unread(conn)
    store.close()
    server.stop()
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.failed == 0 and unread == 0
    assert any("Porto" in f.statement for f in facts_in(Path(config.db), config))
    assert origins and set(origins) == {"fallback:test-model"}
    assert any("extractive fallback" in n and "facts 1" in n for n in result.notes)


def test_a_quarantined_batch_does_not_hold_back_the_turns_after_it(tmp_path: Path) -> None:
    """Fallback off, one attempt allowed: the first batch is quarantined; the next pass
    passes over its turns (status still lists it) and reads the batch after it."""
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.backends.openai_backend import OpenAICompleter
    from dreamd.dream.jobs.facts import BATCH
    from tests.helpers import KEY

    config, server = junk_twice(tmp_path, JobsConfig(fallback=False, max_attempts=1))
    app = make_chat_file(Path(config.db))
    add_turns(app, "s2", [f"I walked {n} km today." for n in range(BATCH)], start=T0)
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
        with store.read() as conn:
            quarantined = [f.item for f in runs.failures(conn, "facts") if f.quarantined]
            before = count_unread(conn)
        second = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    with store.read() as conn:
        after = count_unread(conn)
        still = [f.item for f in runs.failures(conn, "facts") if f.quarantined]
    store.close()
    server.stop()
    assert quarantined == ["after:0"] and before == BATCH + 2
    facts = next(j for j in second.jobs if j.job == "facts")
    assert after == 0 and still == ["after:0"]
    assert any("passed over" in e for e in facts.errors)
    later = facts_in(Path(config.db), config)  # from the batch after the quarantined one
    assert later and all("walked" in f.statement for f in later)


def test_an_llm_that_answers_junk_twice_stores_no_fact(tmp_path: Path) -> None:
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.backends.openai_backend import OpenAICompleter
    from tests.helpers import KEY

    config, server = junk_twice(tmp_path, JobsConfig(fallback=False))
    db = Path(config.db)
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True)
    with store.read() as conn:
        failures = runs.failures(conn, "facts")
        unread = count_unread(conn)
    store.close()
    server.stop()
    facts = next(j for j in result.jobs if j.job == "facts")
    assert facts.failed == 1 and facts.errors[0].startswith("after:0")
    assert "statement must be" in failures[0].last_error  # the second answer's problem
    assert facts_in(db, config) == [] and unread == 2  # read again next pass


def test_a_known_fact_is_found_however_many_of_others_say_the_same() -> None:
    """Ten of Ana's facts closer to the candidate than Sam's own do not hide Sam's."""
    import numpy as np

    from dreamd.dream.jobs.facts import Known

    base = np.zeros(8, dtype=np.float32)
    base[0] = 1.0
    near = base.copy()
    near[1] = 0.2
    near /= np.linalg.norm(near)
    anas = [Fact(i, "u", "Ana", None, f"Ana ran {i} km", None, SAID) for i in range(10)]
    sams = Fact(10, "u", "Sam", None, "Sam ran 5 km", None, SAID)
    known = Known([*anas, sams], {**{f.id: base for f in anas}, sams.id: near})
    assert known.same("Sam", base) == sams
    assert known.same("Bo", base) is None


def test_a_profile_of_two_people_names_each_once_and_leaves_out_their_talk() -> None:
    said = "2023-05-07T10:00:00+00:00"
    facts = [Fact(1, "u", "Mia", None, "Mia has four dogs named Olive, Pip, Bean and Fig.", None,
                  said),
             Fact(2, "u", "Mia", "job", "Mia works as a nurse at Leeds General.", None, said),
             Fact(3, "u", "Mia", None, "Mia would love to see Leo's new painting.", None, said),
             Fact(4, "u", "Leo", None, "Leo moved to Bristol in 2019.", None, said)]
    profile = profile_from(facts, 16)
    assert profile.splitlines() == [
        "About Mia:", "  Work:", "  - Mia works as a nurse at Leeds General.",
        "  Pets:", "  - Mia has four dogs named Olive, Pip, Bean and Fig.",
        "About Leo:", "  Home:", "  - Leo moved to Bristol in 2019."]


def test_a_profile_shows_first_the_facts_the_selector_is_surest_of() -> None:
    """Without the selector's scores, names and numbers weigh a fact; with them, its score
    does (and a thing held at a time, a job or a home, still comes first)."""
    said = "2023-05-07T10:00:00+00:00"
    facts = [Fact(1, "u", "Mia", None, "Mia has two cats called Pip and Bean.", None, said),
             Fact(2, "u", "Mia", None, "Mia walks the old dog from next door every morning.", None,
                  said),
             Fact(3, "u", "Mia", "home", "Mia lives in a flat above the bakery.", None, said)]
    assert profile_from(facts, 2).splitlines() == [
        "Home:", "- Mia lives in a flat above the bakery.",
        "Pets:", "- Mia has two cats called Pip and Bean."]
    assert profile_from(facts, 2, sureness={1: 0.7, 2: 0.95, 3: 0.66}).splitlines() == [
        "Home:", "- Mia lives in a flat above the bakery.",
        "Pets:", "- Mia walks the old dog from next door every morning."]


def test_a_profile_never_says_one_thing_twice(minilm: Any) -> None:
    """Of two facts of one person that say much the same (all-MiniLM-L6-v2 cosine 0.8 or
    more), the profile shows the weightier, and the next fact takes the other's place;
    another person may say the same of themselves."""
    said = "2023-05-07T10:00:00+00:00"
    texts = ["Mia has been training as a nurse for two years.",  # 1
             "Mia started her training as a nurse two years ago.",  # 2, the same
             "Mia volunteers at the animal shelter on Saturdays.",  # 3
             "Mia is learning to play the cello.",  # 4
             "Leo has been training as a nurse for two years."]  # 5, another person
    facts = [Fact(i + 1, "u", text.split()[0], None, text, None, said)
             for i, text in enumerate(texts)]
    vectors = dict(zip(range(1, 6), minilm.embed(texts), strict=True))
    assert float(vectors[1] @ vectors[2]) >= 0.8 > max(
        float(vectors[a] @ vectors[b]) for a in (1, 2) for b in (3, 4))
    sureness = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6, 5: 0.9}
    shown = profile_from(facts, 3, sureness=sureness, vectors=vectors)
    lines = [ln.strip() for ln in shown.splitlines()]
    assert f"- {texts[0]}" in lines and f"- {texts[1]}" not in lines
    assert f"- {texts[2]}" in lines and f"- {texts[3]}" in lines and f"- {texts[4]}" in lines
    assert f"- {texts[1]}" in [ln.strip() for ln in profile_from(
        facts, 3, sureness=sureness).splitlines()]  # without vectors, nothing is left out


def test_a_profile_line_points_at_nothing_shown_or_said_before() -> None:
    """"painted this", "these are" stand for a photo or a turn: no profile line; "this
    bowl", "these 3 dogs" and "this year" name what they point at, and stay."""
    said = "2023-05-07T10:00:00+00:00"
    facts = [Fact(1, "u", "Mia", None, "Mia painted this after the march in May.", None, said),
             Fact(2, "u", "Mia", None, "Mia made this bowl in Mia's pottery class.", None, said),
             Fact(3, "u", "Mia", None, "Mia started learning the cello this year (2023).", None,
                  said),
             Fact(4, "u", "Mia", None, 'Mia: "These are the ones Omar gave me."', None, said),
             Fact(5, "u", "Mia", None, "Mia walks these 3 dogs from the shelter.", None, said)]
    assert sorted(profile_from(facts, 16).splitlines()) == [
        "- Mia made this bowl in Mia's pottery class.",
        "- Mia started learning the cello this year (2023).",
        "- Mia walks these 3 dogs from the shelter.", "Learning:", "Pets:"]


def test_a_profile_line_names_whom_its_he_or_she_stands_for() -> None:
    """A "him", "her" or "he" that the line gives no one to stand for, and a "that"
    pointing back ("loved that pie"), lean on the talk they were said in: no profile line.
    A line that names the person first ("Mia's dad ... and he's moving in"), or uses
    "that" to join its clauses, reads on its own and stays."""
    said = "2023-05-07T10:00:00+00:00"
    texts = ["Mia remembers him from school.",
             "Mia will bring him a present from Osaka.",
             "Mia talked to her afterwards and found her a place to stay.",
             "Mia loved that pie.",
             "Mia misses those summers by the lake.",
             "Mia's dad was diagnosed with diabetes and he's moving in with Mia.",
             "Mia's neighbour asked Mia to feed her cat while she is in Spain.",
             "Mia's youngest took her first steps in May.",
             "Mia works at a studio that designs book covers.",
             "Mia thinks that schools should be funded properly.",
             "Mia has lots of kids' books: classics, picture books, all of that."]
    facts = [Fact(i, "u", "Mia", None, text, None, said) for i, text in enumerate(texts)]
    shown = {ln.removeprefix("- ") for ln in profile_from(facts, 20).splitlines()}
    assert shown & set(texts) == set(texts[5:]), shown


def test_a_listener_without_a_name_leaves_the_profile_whole() -> None:
    said = "2023-05-07T10:00:00+00:00"
    facts = [Fact(1, "u", "Mia", None, "Mia has four dogs named Olive, Pip, Bean and Fig.", None,
                  said)]
    assert profile_from(facts, 16, listeners=("",)).splitlines() == [
        "Pets:", "- Mia has four dogs named Olive, Pip, Bean and Fig."]


def facts_with_workers(tmp_path: Path, workers: int) -> tuple[list[str], int, int]:
    """Five batches of turns, each saying something of its own, through the test server
    (0.2 s a call) with `workers` workers: (the facts' statements, the most facts
    requests the server had at once, turns left unread)."""
    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.backends.openai_backend import OpenAICompleter
    from dreamd.dream.jobs.facts import BATCH
    from dreamd.dream.jobs.registry import JOBS, Registry
    from testkit.openai_server import FakeOpenAI
    from tests.helpers import KEY, completer_config

    server = FakeOpenAI(delay=0.2).start()
    db = tmp_path / f"w{workers}.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"), user=UserConfig(name="Sam"))
    config = dataclasses.replace(config, completer=completer_config(
        server, workers=workers, read_timeout_seconds=5, call_deadline_seconds=30))
    app = make_chat_file(db)
    for s in range(5):
        add_turns(app, f"s{s}", [f"I planted {s * BATCH + n} tulip bulbs in row {n}."
                                 for n in range(BATCH)], start=T0 + timedelta(days=s))
    store = open_sqlite(config)
    with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": KEY}) as client:
        result = run_pass(store, config, HashingEmbedder(), client, trigger="test", force=True,
                          jobs=Registry(tuple(j for j in JOBS if j.name in ("embed", "facts"))))
    with store.read() as conn:
        left = count_unread(conn)
    store.close()
    server.stop()
    assert result.outcome == "ok", result.jobs
    return sorted(f.statement for f in facts_in(db, config)), server.peak["facts"], left


def test_with_several_workers_the_facts_batches_go_to_the_model_at_once(
        tmp_path: Path) -> None:
    """One batch's facts call no longer waits for the batch before it to be written (with
    one worker, a pass's facts were a chain of calls end to end); the facts and the read
    marks come out as one worker leaves them."""
    one, peak_one, left_one = facts_with_workers(tmp_path, 1)
    four, peak_four, left_four = facts_with_workers(tmp_path, 4)
    assert peak_one == 1 and peak_four >= 3
    assert left_one == left_four == 0
    assert four == one and len(one) >= 5


def test_a_facts_write_does_as_much_beside_many_known_facts_as_beside_few(
        tmp_path: Path) -> None:
    """While the facts job holds the write lock the chat app waits, so a batch's facts are
    weighed against those already known (which says the same, which replaces which)
    before its write; inside, only rows are written. Beside 2,000 known facts the write
    makes as many calls as beside 20. (It used to compare while holding the lock: a
    changed job was looked for among all of Sam's facts, one by one, and a write on a
    slow box held the lock 9-27 ms where the app's INSERT then slept 8-18 ms.)"""
    import sys

    import numpy as np

    from dreamd.backends.hashing import HashingEmbedder
    from dreamd.store.facts import add_fact
    from dreamd.store.state import to_blob
    from dreamd.store.vectors import put_vector
    from dreamd.text.keys import space

    embedder = HashingEmbedder()
    calls: dict[int, int] = {}
    for known in (20, 2000):
        db = tmp_path / f"{known}.db"
        config = Config(db=str(db), embed=EmbedConfig(backend="hashing"),
                        user=UserConfig(name="Sam"))
        app = make_chat_file(db)
        add_turns(app, "s1", ["I work as a nurse at the city hospital now.", "Great!",
                              "I switched to tea instead of coffee.", "Good call.",
                              "My sister Ana moved to Porto in May.", "Nice."], start=T0)
        app.close()
        store = open_sqlite(config)
        rng = np.random.default_rng(7)
        with store.write() as conn:  # what earlier passes learned, the job last
            for i in range(known):
                about = "job" if i == known - 1 else None
                said = "works as a barista" if about else f"ran {i} km on day {i}"
                fact_id = add_fact(conn, "default", "Sam", about, f"Sam {said}.", None, SAID,
                                   [], "extractive")
                vector = rng.standard_normal(embedder.dim).astype(np.float32)
                put_vector(conn, space(embedder.model), "fact", str(fact_id),
                           to_blob(vector / np.linalg.norm(vector)))
        counted = [0]

        def count(frame: Any, event: str, arg: Any, store: Any = store,
                  counted: list[int] = counted) -> None:
            if event not in ("call", "c_call") or not store.in_transaction:
                return
            while frame is not None:
                if frame.f_code.co_name == "write_batch":
                    counted[0] += 1
                    return
                frame = frame.f_back

        completer = RecordingCompleter(store)
        sys.setprofile(count)
        try:
            run_pass(store, config, completer.embedder, completer, trigger="test", force=True)
        finally:
            sys.setprofile(None)
        store.close()
        facts = facts_in(db, config)
        assert any("nurse" in f.statement and f.current for f in facts)
        assert not any("barista" in f.statement and f.current for f in facts)
        calls[known] = counted[0]
    assert 0 < calls[2000] <= calls[20] + 10, calls


def test_a_statement_said_again_in_a_later_batch_is_embedded_once(tmp_path: Path) -> None:
    """A run reads turns 200 at a time; what people say again ("Sam: \\"Thanks!\\"", an
    assistant's stock reply) is embedded the first time only, not once per batch. (Each
    batch embedded its statements anew: on a 10k-turn pass the facts job spent 12.6 of
    its 15.6 s in the model, most of it on statements it had embedded before.)"""
    from dreamd.backends.hashing import HashingEmbedder

    db = tmp_path / "m.db"
    config = Config(db=str(db), embed=EmbedConfig(backend="hashing"),
                    user=UserConfig(name="Sam"))
    app = make_chat_file(db)
    said = ["My sister Ana lives in Porto.", "That is lovely, Sam."]
    add_turns(app, "s1", [f"I ran {i} km along the river today." if i % 4 == 0 else said[i % 2]
                          for i in range(500)], start=T0)
    app.close()
    embedded: list[str] = []

    class Counting(HashingEmbedder):
        def embed(self, texts: list[str]) -> Any:
            embedded.extend(texts)
            return super().embed(texts)

    store = open_sqlite(config)
    completer = RecordingCompleter(store)
    run_pass(store, config, Counting(), completer, trigger="test", force=True)
    store.close()
    facts = facts_in(db, config)
    assert any("Ana lives in Porto" in f.statement for f in facts)
    statements = {f.statement for f in facts}
    times = {s: embedded.count(s) for s in statements}
    assert times and all(n == 1 for n in times.values()), times


def test_chit_chat_is_passed_over_at_a_glance_without_a_model_run(tmp_path: Path) -> None:
    """A model run for every proposal was most of the facts job's time (on a real
    conversation, a third of the pass). The selector first glances at each statement (its
    words' input vectors, no run) and passes over what is surely chit-chat: only the rest
    is embedded, each fact kept once. Through the daemon's embedder too."""
    from dreamd.backends.local import LocalEmbedder
    from dreamd.config import AgentConfig
    from dreamd.dream.extractive import ExtractiveCompleter
    from dreamd.runtime.daemon import Health, WatchedEmbedder

    db = tmp_path / "m.db"
    config = Config(db=str(db), user=UserConfig(name="Sam"), agent=AgentConfig(name="Wren"))
    chat = ["Thanks so much, you are the best!", "Aww, that is so sweet of you.",
            "Good luck with that, I hope it goes well!"]
    news = ["My sister Ana moved to Porto last spring.", "I work night shifts at the hospital."]
    app = make_chat_file(db)
    asked = "Tell me more."
    add_turns(app, "s1", [t for line in chat + news for t in (asked, line)], start=T0,
              roles=("assistant", "user"))
    app.close()
    embedded: list[str] = []

    class Counting(LocalEmbedder):
        def embed(self, texts: list[str]) -> Any:
            embedded.extend(texts)
            return super().embed(texts)

    store = open_sqlite(config)
    watched = WatchedEmbedder(Counting(threads=1), Health(), deadline=60)
    run_pass(store, config, watched, ExtractiveCompleter(watched), trigger="test", force=True)
    store.close()
    proposed = {line: [c.statement for c in extract("Sam", line, T0.isoformat(), "Wren", asked)]
                for line in chat + news}
    assert all(proposed.values()), proposed  # each line proposes a statement
    assert not [s for line in chat for s in proposed[line] if s in embedded]
    kept = [f.statement for f in facts_in(db, config)]
    assert any("Ana moved to Porto" in s for s in kept) and \
        any("night shifts" in s for s in kept), kept
    assert all(embedded.count(s) == 1 for s in kept), kept


@pytest.mark.parametrize("quote", ["She's decided the puppy is her grandson.",
                                   "He's been on nights since March.",
                                   "They're moving to Cork in June.",
                                   "It's a lot cheaper than Zurich."])
def test_a_quote_opening_on_a_pronoun_of_the_talk_is_no_profile_line(quote: str) -> None:
    """A pronoun and its verb run together ("She's") are no name: in the speaker's own words
    it stands for someone the talk named, so the quote does not read on its own."""
    from dreamd.text.from_facts import stands_alone
    from dreamd.text.speech import opens_with_name

    assert not opens_with_name(quote)
    assert not stands_alone(Fact(1, "u", "Noor", None, f'Noor: "{quote}"', None, SAID))
    named = 'Noor: "Kofi\'s been on nights since March."'  # a name's "'s" is still a name
    assert stands_alone(Fact(2, "u", "Noor", None, named, None, SAID))


@pytest.mark.parametrize(("line", "leans"), [
    ("Mia started when Mia was nine and loves it.", True),  # started what?
    ("Mia started in May.", True),
    ("Omar is going to keep going and never quit.", True),
    ("Omar joined last year, Omar says.", True),
    ("Omar won't quit, even when it's hard.", True),
    ("Mia didn't stop when Mia moved.", True),
    ("Mia started a choir in May.", False),
    ("Omar quit smoking in 2019.", False),
    ("Mia joined the band last year.", False),
    ("Mia began to paint after Mia retired.", False),
    ("Omar finished his thesis in March.", False),
    ("Colm could visit in August after fieldwork finishes.", False),  # a thing stops
    ("Mia says the course starts in May.", False),
])
def test_a_start_or_a_stop_whose_object_the_talk_gave_leans_on_it(line: str,
                                                                   leans: bool) -> None:
    from dreamd.text.from_facts import points_at_the_talk

    assert points_at_the_talk(line, line.split()[0]) is leans


@pytest.mark.parametrize(("line", "leans"), [
    ("Ravi did something similar in college.", True),  # similar to what?
    ("Noor had a similar accident last spring.", True),
    ("Tom wants to try something similar next year.", True),
    ("Lena bought a car similar to her sister's.", False),  # the line says to what
    ("Omar has a similar build to his father.", False),
    ("Priya works in a similar field as her mother.", False),
    ("Jun likes films with similar endings.", False),  # no one thing to compare
])
def test_something_similar_to_what_the_talk_said_leans_on_it(line: str, leans: bool) -> None:
    from dreamd.text.from_facts import points_at_the_talk

    assert points_at_the_talk(line, line.split()[0]) is leans

"""What the offline tiers read like: a gist tells what a session said, without greetings,
thanks, reactions or stage directions; a month's era is drawn from all its days; the
narrative's open threads are plans not yet past that read on their own; a self-state of
a chat between two named people has topics.

Made on the tests' own samples and sentences written here (tests/data), never on the
benchmark's fresh set (bench/fresh) nor on any dev slice.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from dreamd.cli.demo import parse_samples
from dreamd.config import Config
from dreamd.dream.cycle import run_pass
from dreamd.dream.extractive import ABOUT, ExtractiveCompleter
from dreamd.dream.prompts import summary_prompt
from dreamd.ids import DEFAULT_USER
from dreamd.memory.export import export_user
from dreamd.memory.importers import parse_locomo, write_sessions
from dreamd.models import Fact
from dreamd.store.opening import open_store
from dreamd.text.from_facts import era_from, narrative_from
from tests.test_extraction import INTERJECTIONS

DATA = Path(__file__).parent / "data"
NAMES = {"user": "Jonah", "agent": "Kai"}


def gist(completer: ExtractiveCompleter, turns: list[tuple[str, str]], lines: int = 8,
         previous: str | None = None, said_at: str = "2025-03-01T10:00:00+00:00") -> list[str]:
    said = [f"{role}: {text}" for role, text in turns]
    prompt = summary_prompt(NAMES, previous, said, lines, said_at=[said_at] * len(said))
    return completer.complete(prompt).text.splitlines()


def opening(line: str) -> str:
    body = re.sub(r'^[^:"]{1,40}: "', "", line)
    return (re.findall(r"[A-Za-z']+", body)[:1] or [""])[0].lower()


@pytest.mark.parametrize("sample", ["second_sample.txt", "third_sample.txt"])
def test_a_gist_line_is_news_not_a_greeting_a_reaction_or_markup(minilm: Any,
                                                                  sample: str) -> None:
    completer = ExtractiveCompleter(minilm)
    for session in parse_samples((DATA / sample).read_text("utf-8")):
        lines = gist(completer, [(role, text) for role, text, _ in session.turns])
        news = [ln for ln in lines if not ln.startswith(ABOUT)]
        assert news, session.session_id
        assert len(lines) <= 8
        assert not any("[" in ln for ln in lines), lines
        assert not [ln for ln in news if opening(ln) in INTERJECTIONS], news


CHAT = [
    ("user", "Hey Kai! Wow, what a week."),
    ("assistant", "Hi Jonah! Tell me everything."),
    ("user", "I started a pottery class at the studio on Elm Street on Monday."),
    ("assistant", "That's wonderful! How was it?"),
    ("user", "Messy. Here it is! [shares an image: a photo of a lopsided clay bowl on a wheel]"),
    ("assistant", "Haha, I love it."),
    ("user", "My cousin Dalia signed up too, she wants to make plates for her wedding in June."),
    ("assistant", "Thanks for sharing, that sounds lovely."),
]


def test_a_gist_tells_the_news_in_the_order_said_and_what_an_image_showed(minilm: Any
                                                                          ) -> None:
    lines = gist(ExtractiveCompleter(minilm), CHAT)
    news = [ln for ln in lines if not ln.startswith(ABOUT)]
    text = "\n".join(news)
    assert "Jonah started a pottery class at the studio on Elm Street" in text
    assert "Jonah shared a photo of a lopsided clay bowl on a wheel." in text
    assert "Dalia" in text and "[" not in text
    # Ordered as said: the class, the bowl, then Dalia.
    at = [text.index("pottery"), text.index("clay bowl"), text.index("Dalia")]
    assert at == sorted(at)
    # Greetings, thanks and reactions are gone.
    assert not re.search(r"\b(?:Hey|Hi|Wow|Haha|Thanks)\b", text), text
    assert lines[0].startswith(ABOUT) and "Dalia" in lines[0]


def test_an_updated_gist_keeps_what_it_had_and_adds_the_new_news(minilm: Any) -> None:
    completer = ExtractiveCompleter(minilm)
    first = "\n".join(gist(completer, CHAT[:4]))
    again = gist(completer, CHAT[4:], previous=first)
    assert again[0].startswith(ABOUT + "Elm Street") or "Elm Street" in again[0]
    text = "\n".join(again[1:])
    assert "pottery class" in text and "Dalia" in text
    assert text.index("pottery class") < text.index("Dalia")


def fact(i: int, statement: str, day: str, about: str | None = None,
         subject: str = "Sam") -> Fact:
    return Fact(i, "u", subject, about, statement, None, f"{day}T10:00:00+00:00")


def test_a_busy_month_s_era_is_drawn_from_its_days_weightiest_first() -> None:
    facts = [fact(1, "Sam met the new neighbours, a couple from Oslo.", "2026-05-02"),
             fact(2, "Sam painted the fence green.", "2026-05-02"),
             fact(3, "Sam bought a second-hand piano for 300 pounds.", "2026-05-02"),
             fact(4, "Sam ran 10 km along the canal.", "2026-05-02"),
             fact(5, "Sam started a job as a sound engineer at Halden Studios.", "2026-05-11",
                  about="job"),
             fact(6, "Sam's sister Ines visited from Porto.", "2026-05-19"),
             fact(7, "Sam adopted a cat called Miso.", "2026-05-27")]
    lines = era_from(facts, "2026-05", 4).splitlines()
    assert len(lines) == 4
    assert len({ln.split(":")[0] for ln in lines}) == 4  # four days, not the first one's four
    assert "sound engineer" in lines[0]  # a thing held at a time weighs most


def test_open_threads_are_plans_not_yet_past_that_read_on_their_own() -> None:
    facts = [fact(1, "Sam will run the Lisbon half marathon (Sunday 8 March 2026).",
                  "2026-02-01"),
             fact(2, "Sam is going to learn Portuguese this year.", "2025-08-01"),
             fact(3, "Sam is using it to plan the route.", "2026-04-20"),
             fact(4, "Sam plans to visit Ines in Porto (Saturday 30 May 2026).", "2026-04-20"),
             fact(5, "Sam decided to take the night train to Porto.", "2026-04-25")]
    threads = [ln for ln in narrative_from(facts, "2025-01-01", 10).splitlines()
               if ln.startswith("- open:")]
    assert threads == ["- open: Sam plans to visit Ines in Porto (Saturday 30 May 2026).",
                       "- open: Sam decided to take the night train to Porto."]


def test_a_change_without_a_thing_held_says_what_changed_not_none() -> None:
    """A fact a newer one changed ("switched to the 10k") that is no job, home or partner is
    told as a change, never under "None"."""
    old = dataclasses.replace(fact(1, "Sam is training for the Porto marathon.", "2026-03-01"),
                              replaced_by=2)
    new = fact(2, "Sam switched to the 10k instead.", "2026-04-12")
    job = dataclasses.replace(fact(3, "Sam works at a bakery.", "2026-03-01", about="job"),
                              replaced_by=4)
    lines = narrative_from([old, new, job, fact(4, "Sam works at a bank now.", "2026-04-20",
                                                about="job")], "2026-04-01", 10).splitlines()
    assert lines[0] == "- changed: Sam switched to the 10k instead. (before: Sam is training " \
                       "for the Porto marathon)"
    assert lines[1].startswith("- job: Sam works at a bank now.")
    assert not any("None" in ln for ln in lines)


def turns(session: int, said: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"speaker": who, "dia_id": f"D{session}:{i + 1}", "text": text}
            for i, (who, text) in enumerate(said)]


# Written for this test: two friends, their roles their names as an import keeps them.
TWO_PEOPLE = {"sample_id": "two", "conversation": {
    "speaker_a": "Noor", "speaker_b": "Ivo",
    "session_1_date_time": "6:10 pm on 4 March, 2025",
    "session_1": turns(1, [
        ("Noor", "Hey Ivo! Guess what, the bakery on Quay Street hired me as a pastry chef."),
        ("Ivo", "No way, congrats! When do you start?"),
        ("Noor", "Next Monday. The owner, Hélène, trained in Lyon."),
        ("Ivo", "Lyon! Ask her about the croissants there."),
        ("Noor", "Ha, I will. How is the boat coming along?"),
        ("Ivo", "Slowly. I sanded the hull of the Marigold all weekend."),
        ("Noor", "You and that boat. Is the Marigold ready for the Fastnet race?"),
        ("Ivo", "Not yet, but my brother Tomas is helping me rig the mast in April."),
    ]),
    "session_2_date_time": "8:30 pm on 19 March, 2025",
    "session_2": turns(2, [
        ("Ivo", "How was the first week at the bakery?"),
        ("Noor", "Exhausting, but Hélène let me make the croissants on Friday."),
        ("Ivo", "The Lyon croissants?"),
        ("Noor", "The very same. The bakery sold out by nine."),
        ("Ivo", "Tomas and I put the mast on the Marigold yesterday."),
        ("Noor", "So the Fastnet race is on?"),
        ("Ivo", "If the sails arrive from Cork in time, yes."),
    ])}, "qa": []}


def test_a_chat_between_two_named_people_has_topics_in_its_self_state(
        tmp_path: Path, minilm: Any) -> None:
    """An imported chat's turns are the people's own (roles are their names, not
    "user"): the self-state says what they talked about."""
    db = tmp_path / "m.db"
    config = Config(db=str(db))
    store = open_store(config)
    write_sessions(store, parse_locomo([TWO_PEOPLE], "two people"))
    run_pass(store, config, minilm, ExtractiveCompleter(minilm), trigger="test", force=True)
    export = export_user(store, DEFAULT_USER, config.agent.id)
    store.close()
    topics = export["reflection"]["data"]["topics"]
    assert len(topics) >= 3, topics
    assert not {t.lower() for t in topics} & (INTERJECTIONS | {"noor", "ivo"})
    assert "everyday things" not in export["reflection"]["data"]["self_narrative"]
    for tier in [g["content"] for g in export["gists"]] + [e["content"] for e in export["eras"]]:
        assert "[" not in tier


def shingles(text: str) -> set[tuple[str, ...]]:
    words = tuple(re.findall(r"\w+", text.lower()))
    return {words[i:i + 8] for i in range(len(words) - 7)}


@pytest.mark.parametrize("exam", ["fresh", "fresh_msc", "fresh_chat"])
def test_the_benchmark_s_fresh_sets_are_in_no_example_set_and_no_fixture(exam: str) -> None:
    """bench/fresh, bench/fresh_msc and bench/fresh_chat are exams: no run of eight of their
    words is in what dreamd learns from (dreamd/data) or in the tests' fixtures
    (tests/data)."""
    root = Path(__file__).parent.parent
    fresh: set[tuple[str, ...]] = set()
    for path in sorted((root / "bench" / exam).glob("*.txt")):
        for line in path.read_text("utf-8").splitlines():
            if ":" in line and not line.startswith(("#", "speakers:", "style:")):
                fresh |= shingles(line.split(":", 1)[1])
    assert len(fresh) > 1000
    for folder in (root / "dreamd" / "data", DATA):
        for path in folder.iterdir():
            if path.suffix in (".txt", ".json"):
                assert not fresh & shingles(path.read_text("utf-8")), path


def test_a_model_s_stage_directions_and_greetings_are_cut_from_its_gist(tmp_path: Path
                                                                        ) -> None:
    """Against the test server: a model that copies a greeting, a reaction and an image's
    markup into a gist gets them cut; its news is stored."""
    from tests.test_validate import pass_against

    said = ("say:- The user has been hiking in the mountains with the sister. "
            "[shares an image: a photo of a mountain lake]\\n- Wow, amazing!\\n"
            "- Thanks for sharing!")
    _, gists, failures, _ = pass_against(tmp_path, said)
    assert failures == [] and len(gists) == 1
    assert gists[0] == "- The user has been hiking in the mountains with the sister."


def test_a_model_s_gist_of_nothing_but_greetings_is_not_stored(tmp_path: Path) -> None:
    from tests.test_validate import pass_against

    _, gists, failures, _ = pass_against(tmp_path, "say:- Wow, amazing!\\n- Haha, yes.",
                                         "say:- Oh, lovely! [shares an image: a photo]")
    assert gists == [] and len(failures) == 1
    assert "only greetings" in failures[0]

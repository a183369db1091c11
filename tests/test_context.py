"""The tiered context: never over budget, tiers in order, the newest turns kept."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.llm_output import estimate_tokens
from dreamd.cli.demo import sample_sessions, write_sessions
from dreamd.config import Config, EmbedConfig
from dreamd.dream.cycle import run_pass
from dreamd.memory.api import Memory
from dreamd.memory.context import TIERS, build
from tests.helpers import TOPICS, RecordingCompleter, add_turns, make_chat_file

ORDER = [name for name, _, _ in TIERS]


def parts(n: int = 30) -> dict[str, list[str]]:
    return {name: [f"{name} line {i}: " + "word " * (3 + i % 7) for i in range(n)]
            for name in ORDER}


@pytest.mark.parametrize("budget", [0, 5, 12, 40, 100, 333, 1000, 5000])
def test_budget_is_never_exceeded_and_tiers_keep_their_order(budget: int) -> None:
    context = build(parts(), budget)
    assert estimate_tokens(context.text) <= budget if context.text else True
    assert context.tokens <= budget
    names = [name for name, _ in context.sections]
    assert names == [n for n in ORDER if n in names]


def test_unused_share_goes_to_the_other_tiers() -> None:
    few = {"profile": ["likes tea"], "recent": [f"user: turn {i} " * 5 for i in range(200)]}
    context = build(few, 1000)
    assert context.tokens > 900  # the recent turns took what the empty tiers left
    recent = dict(context.sections)["recent"]
    assert recent[-1] == few["recent"][-1]  # the newest turn is kept ...
    assert few["recent"][0] not in recent  # ... the oldest dropped


@pytest.mark.parametrize("budget", range(20, 80, 3))
def test_a_profile_heading_comes_only_with_a_point_under_it(budget: int) -> None:
    profile = {"profile": ["Home:", "- Ana moved to a flat near the river in Porto last May.",
                           "Work:", "- Ana teaches chemistry at the secondary school."]}
    kept = dict(build(profile, budget).sections).get("profile", ())
    for i, line in enumerate(kept):
        if line.endswith(":"):
            assert i + 1 < len(kept) and kept[i + 1].startswith("- ")
    people = {"profile": ["About Ana:", "Home:", "- Ana lives in Porto.", "About Rui:",
                          "Work:"]}
    assert dict(build(people, 100).sections)["profile"] == (
        "About Ana:", "Home:", "- Ana lives in Porto.")


@pytest.fixture
def demo_memory(tmp_path: Path):
    db = tmp_path / "m.db"
    conn = make_chat_file(db)
    write_sessions(conn, sample_sessions())
    conn.close()
    embedder = HashingEmbedder()
    memory = Memory(db, config=Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)
    run_pass(memory.store, memory.config, embedder, RecordingCompleter(memory.store, embedder),
             trigger="test", force=True)
    yield memory
    memory.close()


@pytest.mark.parametrize("budget", [60, 250, 1000, 4000])
def test_context_over_a_real_file(demo_memory: Memory, budget: int) -> None:
    context = demo_memory.context("s12", budget=budget)
    assert estimate_tokens(context.text) <= budget
    sections = dict(context.sections)
    assert "recent" in sections  # the conversation itself always gets room
    assert sections["recent"][-1].startswith("assistant: Boa noite, Sam")
    if budget >= 1000:
        assert set(ORDER) <= set(sections)
        # Gists and details come from other sessions only.
        assert all("Moved into the new flat" not in line for line in sections["gists"])


def test_context_query_picks_relevant_gists(demo_memory: Memory) -> None:
    context = demo_memory.context("s12", query="half marathon race time Ana finish line",
                                  budget=2000)
    gists = dict(context.sections)["gists"]
    assert any("marathon" in g for g in gists)


def dreamed(db: Path) -> Memory:
    """The library on `db` after one forced pass (hashing embedder, offline producers)."""
    embedder = HashingEmbedder()
    memory = Memory(db, config=Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)
    run_pass(memory.store, memory.config, embedder, RecordingCompleter(memory.store, embedder),
             trigger="test", force=True)
    return memory


def test_an_era_of_one_conversation_is_not_headed_twice(tmp_path: Path) -> None:
    """An era is stored as "2026-03: 1 conversation." and its points; the context block
    names the month once per point and leaves the count out (it read
    "2026-03: 2026-03: 1 conversation.")."""
    db = tmp_path / "m.db"
    conn = make_chat_file(db)
    for month, topic in enumerate(TOPICS[:3], start=1):
        add_turns(conn, f"m{month}", [f"I spent the weekend {topic}.", "How did it go?",
                                      f"Really well, {topic} is my new thing."],
                  start=datetime(2026, month, 10, 9, 0, tzinfo=UTC))
    add_turns(conn, "now", ["What have I been up to this year?"],
              start=datetime(2026, 4, 2, 9, 0, tzinfo=UTC))
    conn.close()
    memory = dreamed(db)
    try:
        eras = dict(memory.context("now", query="weekend", budget=4000).sections)["eras"]
    finally:
        memory.close()
    assert eras
    for line in eras:
        named, _, point = line.partition(": ")
        assert re.fullmatch(r"2026-0[1-3]", named), line
        assert not re.match(r"(\d{4}-\d{2}: )?\d+ conversations?\.$", point), line


def test_a_gist_shows_the_lines_the_question_is_about(tmp_path: Path) -> None:
    """The context block has room for a few lines of each gist: of a long session, the
    ones that share the question's words, not only the ones said first (it showed the
    session's opening lines whatever was asked)."""
    db = tmp_path / "m.db"
    conn = make_chat_file(db)
    said = ["I started a new job at the hospital in Leeds as a night nurse last month.",
            "My sister Ruth is visiting from Glasgow with her two boys next weekend.",
            "I have been hiking in the Peak District every Sunday since the spring.",
            "I finally finished reading all of the Earthsea books by Ursula Le Guin.",
            "My landlord put the rent up again, so I may move to a flat near the river.",
            "I signed up for cello lessons with Mrs Okafor on Thursday evenings."]
    texts = [t for line in said for t in (line, "That sounds like a lot, tell me more.")]
    add_turns(conn, "long", texts, start=datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    add_turns(conn, "now", ["Hello again."], start=datetime(2026, 4, 2, 9, 0, tzinfo=UTC))
    conn.close()
    memory = dreamed(db)
    try:
        with memory.store.read() as read:
            (gist,) = [r[0] for r in read.execute(
                "SELECT content FROM summaries WHERE session_id = 'long'")]
        asked = memory.context("now", query="When are my cello lessons?", budget=1000,
                               raw_turns=False)
        other = memory.context("now", query="How is the new job going?", budget=1000,
                               raw_turns=False)
    finally:
        memory.close()
    assert "cello" in gist.split("\n", 1)[1]  # the session's gist holds it, past its opening
    (shown,) = dict(asked.sections)["gists"]
    assert "Okafor on Thursday" in shown, shown
    assert shown.startswith("2026-03 About: ")  # what the session was about stays first
    assert estimate_tokens(shown) <= 80
    (opening,) = dict(other.sections)["gists"]
    assert "hospital" in opening and "cello" not in opening, opening

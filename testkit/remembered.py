"""What a friend would remember from a sample conversation, and what no memory may hold:
a smoke test of the profile, not a score to grow the code against.

Two lists: Sam's, written from the shipped sample conversations
(dreamd/data/sample_conversations.txt), and Jonah's, written with the second sample
(tests/data/second_sample_keep.txt) by someone who had not seen the extractor. A profile
line counts as remembering a thing when it says it: their cosine by the embedded model,
the person's own name left out of both (a name shared says nothing about what is said),
is at least MATCH, the bar bench.quality holds facts to against LoCoMo's observations. A
never-line is present when the profile holds it word for word (whole words: "hey" is not
in "they").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dreamd.backends.protocols import Embedder

MATCH = 0.5  # cosine from which one statement says what another says


@dataclass(frozen=True)
class FriendList:
    person: str
    remember: tuple[str, ...]  # the things a friend would keep, each a plain statement
    core: tuple[str, ...]  # of them, the ones a profile must not miss
    never: tuple[str, ...]  # lines no memory may hold


SAM = FriendList(
    person="Sam",
    remember=(
        "Sam lives in Lisbon, now in a flat in Campo de Ourique",
        "Sam works as a backend developer at a small logistics startup",
        "Sam became tech lead of the routing team",
        "Sam manages three other developers",
        "Sam keeps Tuesday and Thursday mornings for coding",
        "Sam's manager is Rui",
        "Dogs are welcome at Sam's office on Fridays",
        "Sam has a sister called Ana",
        "Sam and Ana come from Manchester",
        "Ana is the faster runner, with a 3:40 marathon and a 1:41 half",
        "Sam adopted Biscuit, a terrier mix from the shelter",
        "Sam took up running in July",
        "Sam's longest run is 14 km",
        "Sam ran the half marathon in 1 hour 57",
        "Sam's goal was under two hours",
        "Sam runs three times a week, with long runs on Sundays",
        "Sam stretches after runs",
        "Sam bought new running shoes and has no knee pain",
        "Sam will run the Seville marathon with Ana in February",
        "Sam takes evening Portuguese classes in Arroios",
        "Sam passed the A2 Portuguese exam and starts B1 in January",
        "Sam was on call when the main database went down",
        "Sam shipped the new retry policy",
    ),
    core=(
        "Sam lives in Lisbon, now in a flat in Campo de Ourique",
        "Sam became tech lead of the routing team",
        "Sam has a sister called Ana",
        "Sam adopted Biscuit, a terrier mix from the shelter",
        "Sam ran the half marathon in 1 hour 57",
        "Sam will run the Seville marathon with Ana in February",
        "Sam passed the A2 Portuguese exam and starts B1 in January",
        "Sam works as a backend developer at a small logistics startup",
        "Sam's manager is Rui",
    ),
    never=("maybe next time", "tired and want to unpack", "spend all day in meetings",
           "ask Rui if the company can help", "Tell me more", "Exhausted", "Only water",
           "pastéis de nata it is", "assistant:", "Wren:", "we both missed", "each of them"),
)


def from_file(path: Path, person: str) -> FriendList:
    """A list written as tests/data/second_sample_keep.txt is: one thing a line, then
    "## never" and the lines no memory may hold."""
    remember: list[str] = []
    never: list[str] = []
    into = remember
    for line in path.read_text("utf-8").splitlines():
        if line.strip() == "## never":
            into = never
        elif line.strip() and not line.startswith("#"):
            into.append(line.strip())
    return FriendList(person, tuple(remember), (), tuple(never))


@dataclass(frozen=True)
class Judged:
    friends: FriendList
    found: tuple[str, ...]  # the things remembered
    lines: int  # the profile's fact lines
    kept: int  # of them, lines that say something remembered
    wrong: tuple[str, ...]  # never-lines present

    @property
    def recall(self) -> float:
        return len(self.found) / len(self.friends.remember)

    @property
    def precision(self) -> float:
        return self.kept / self.lines if self.lines else 0.0

    @property
    def core(self) -> int:
        return sum(name in self.found for name in self.friends.core)

    def line(self, label: str) -> str:
        return (f"{label}: {self.lines} lines, precision {100 * self.precision:5.1f} "
                f"({self.kept}/{self.lines}), recall {100 * self.recall:5.1f} "
                f"({len(self.found)}/{len(self.friends.remember)}; core {self.core}/"
                f"{len(self.friends.core)}), never-lines {len(self.wrong)}")


def judged(text: str, friends: FriendList, embedder: Embedder) -> Judged:
    """A profile (or any list of "- " lines) against a friend's list."""
    lines = [ln.strip()[2:] for ln in text.splitlines() if ln.strip().startswith("- ")]
    wrong = tuple(ln for ln in friends.never
                  if re.search(rf"(?<!\w){re.escape(ln)}(?!\w)", text))
    if not lines:
        return Judged(friends, (), 0, 0, wrong)
    unnamed = re.compile(rf"\b{re.escape(friends.person)}(?:['’]s)?\b:?\s*")
    vectors = np.asarray(embedder.embed(
        [unnamed.sub("", t).strip(' "') for t in (*friends.remember, *lines)]))
    things, said = vectors[:len(friends.remember)], vectors[len(friends.remember):]
    close = said @ things.T >= MATCH  # line x thing
    found = tuple(t for j, t in enumerate(friends.remember) if close[:, j].any())
    return Judged(friends, found, len(lines), int(close.any(axis=1).sum()), wrong)

"""A person's word, as every producer and reader keeps it: which facts they withdrew (no
tier may say them again) and which they stand behind (pinned, stated or corrected by
them: every profile shows them, whatever the ranking).

Pure but for `read_word`, the one read of it every producer makes: facts and text in,
text out. The rows are dreamd.store.corrections'; the operations dreamd.memory.corrections'.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from dreamd.models import Correction, Fact
from dreamd.store.corrections import word_parts
from dreamd.store.facts import facts_of
from dreamd.store.interface import Conn
from dreamd.text.from_facts import TOPICS, since, topic
from dreamd.text.speech import STOPWORDS

_WORDS = re.compile(r"[a-z0-9]+")
_RESOLVED = re.compile(r"\([^)]*\)")  # "(Saturday 11 July 2026)": dates dreamd added
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
# Words a retelling changes: who speaks and to whom ("I" -> "Sam"), and the verbs that
# carry a quote ("Sam said: ...").
_RETOLD = STOPWORDS | frozenset("i me my mine said says told".split())
COVERED = 0.8  # of a statement's words a sentence must hold to say it again
# What a gist or tier that said nothing but withdrawn words holds until it is rebuilt.
EMPTIED = "(nothing kept: what this said was withdrawn by a person)"


def words_of(text: str, names: tuple[str, ...] = ()) -> set[str]:
    """What a text says, as words a retelling keeps: function words, pronouns and the
    names given (the subject, who becomes "I" in the turn) left out, and each long word
    cut to its first five letters ("moved"/"moving", "opportunity"/"opportunities")."""
    dropped = {n.lower() for n in names}
    found = set()
    for word in _WORDS.findall(_RESOLVED.sub(" ", text.lower())):
        if word in _RETOLD or word in dropped:
            continue
        found.add(word[:5])
    return found


def says(sentence: str, fact: Fact) -> bool:
    """Whether `sentence` says what `fact` says: most of the fact's words are in it (and,
    for a fact of one or two words, the sentence is mostly those words)."""
    wanted = words_of(fact.statement, (fact.subject,))
    if not wanted:
        return False
    held = words_of(sentence, (fact.subject,))
    shared = len(wanted & held)
    if shared < math.ceil(COVERED * len(wanted)):
        return False
    return len(wanted) >= 3 or shared * 2 >= len(held)


def when(timestamp: str | None) -> datetime | None:
    """An ISO time as an aware datetime (UTC where it names no zone); None if not one."""
    if not timestamp:
        return None
    try:
        moment = datetime.fromisoformat(timestamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def older_than_word(said_at: str, fact: Fact) -> bool:
    """Whether a turn said at `said_at` came before the person's word on `fact`: it is
    evidence the person already had, and never outweighs their word."""
    said, word = when(said_at), when(fact.word_at)
    return word is not None and (said is None or said <= word)


@dataclass(frozen=True)
class Word:
    """A user's word as it stands: `seq` the number of their newest correction (0: none),
    `unsaid` the facts withdrawn that no current fact says again (a newer turn that says
    one again is new evidence), `kept` the current facts a person stands behind."""

    seq: int = 0
    unsaid: tuple[Fact, ...] = ()
    kept: tuple[Fact, ...] = ()
    corrections: tuple[Correction, ...] = ()

    @staticmethod
    def of(seq: int, withdrawn: list[Fact], current: list[Fact],
           corrections: list[Correction] | None = None) -> Word:
        """From the user's withdrawn facts and current ones: a withdrawn fact that a fact
        learned after the person's word says again is said again (new evidence)."""
        live = [f for f in current if f.current]
        unsaid = tuple(f for f in withdrawn if not any(
            c.subject == f.subject and not older_than_word(c.learned_at, f)
            and says(c.statement, f) for c in live))
        kept = tuple(f for f in live if f.by_person)
        return Word(seq, unsaid, kept, tuple(corrections or ()))

    def unsays(self, sentence: str) -> Fact | None:
        """The withdrawn fact `sentence` says, if any."""
        return next((f for f in self.unsaid if says(sentence, f)), None)

    def before(self, said_at: str | None) -> Word:
        """The word as it holds for a turn said at `said_at`: a turn newer than the
        person's word on a fact is new evidence, and may say it."""
        if said_at is None:
            return self
        return Word(self.seq, tuple(f for f in self.unsaid if older_than_word(said_at, f)),
                    self.kept, self.corrections)


def scrubbed(text: str, word: Word, said_at: str | None = None) -> str:
    """`text` without the sentences that say a withdrawn fact (a turn's text: those the
    turn, said at `said_at`, said before the person's word); a line left without words
    goes (its "- " or "Name: " opening does not count as words)."""
    word = word.before(said_at)
    if not word.unsaid or not text:
        return text
    out = []
    for line in text.splitlines():
        kept = _line_kept(line, word)
        if kept is not None:
            out.append(kept)
    return "\n".join(out)


_OPENING = re.compile(r"^(\s*(?:[-*•]\s+)?(?:[\w .'’-]{1,40}:\s+)?)")


def _line_kept(line: str, word: Word) -> str | None:
    opening = _OPENING.match(line)
    head = opening.group(1) if opening else ""
    body = line[len(head):]
    parts = _SENTENCE_END.split(body) if body.strip() else []
    kept = [p for p in parts if word.unsays(p) is None and word.unsays(f"{head}{p}") is None]
    if len(kept) == len(parts):
        return line
    if not kept or not words_of(" ".join(kept)):
        return None
    return head + " ".join(kept)


def profile_kept(text: str, word: Word) -> str:
    """A profile as the person's word has it: nothing withdrawn, and every fact they stand
    behind, each under its topic (a topic heading left without a point goes)."""
    lines = _without_bare_headings(scrubbed(text, word).splitlines())
    for fact in word.kept:
        if any(says(line, fact) for line in lines):
            continue
        lines = _with_point(lines, topic(fact.statement), f"- {fact.statement}{since(fact)}")
    return "\n".join(lines).strip()


_HEADINGS = {name for name, _ in TOPICS} | {"Other"}


def _is_heading(line: str) -> bool:
    return line.rstrip().endswith(":") and line.strip()[:-1] in _HEADINGS


def _without_bare_headings(lines: list[str]) -> list[str]:
    out = []
    for i, line in enumerate(lines):
        if _is_heading(line) and (i + 1 >= len(lines) or _is_heading(lines[i + 1])
                                  or not lines[i + 1].strip()):
            continue
        out.append(line)
    return out


def _with_point(lines: list[str], heading: str, point: str) -> list[str]:
    """`point` at the end of the `heading:` group (the group added at the end if none)."""
    at = next((i for i, ln in enumerate(lines) if ln.strip() == f"{heading}:"), None)
    if at is None:
        return [*lines, f"{heading}:", point]
    end = at + 1
    while end < len(lines) and lines[end].lstrip().startswith("- "):
        end += 1
    return [*lines[:end], point, *lines[end:]]


def line_changes(before: str, after: str) -> tuple[list[str], list[str]]:
    """(lines added, lines dropped) from one text to the next, in order: headings
    ("Home:") are not lines a person reads as news."""
    old = [ln.strip() for ln in before.splitlines() if ln.strip() and not _is_heading(ln)]
    new = [ln.strip() for ln in after.splitlines() if ln.strip() and not _is_heading(ln)]
    return [ln for ln in new if ln not in old], [ln for ln in old if ln not in new]


def masked(line: str, word: Word) -> str:
    """A line as the diary keeps it: one that says a withdrawn fact is named by the fact's
    id, not by its words."""
    fact = word.unsays(line)
    return line if fact is None else f"({fact.withdrawn} by a person: fact #{fact.id})"


def read_word(conn: Conn, user: str, current: list[Fact] | None = None) -> Word:
    """Inside a read: the user's word as it stands (with their current facts, when the
    caller has read them already; else they are read only where a fact was withdrawn, and
    `kept` is left empty: for a caller that only scrubs)."""
    seq, withdrawn, corrections = word_parts(conn, user)
    if current is None:
        current = facts_of(conn, user, current_only=True) if withdrawn else []
        current = [f for f in current if not f.by_person]
    return Word.of(seq, withdrawn, current, corrections)

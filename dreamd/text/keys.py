"""What a turn is indexed by: its key, for the vector and for the words.

A turn's words alone lose who said it, to whom and when: "I went yesterday" matches a
question about anyone, any day. The key puts them back — the date it was said, the
speaker and the addressee, first and second person written as their names, and
relative dates made absolute:

    Sunday 7 May 2023. Caroline (to Melanie): Caroline went to a support group
    yesterday (Saturday 6 May 2023).

Measured on LoCoMo (RETRIEVAL.md): dropping the speaker from the key halves recall. The
scheme is versioned: a changed scheme is a new vector space (`space`), re-embedded in
the background like a model change, never mixed with the old one.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from dreamd.text.dates import day_of, long_date, resolve

SCHEME = 3  # 1: "role: content"; 2: the day said in front of the vector key too


def space(model: str) -> str:
    """The name vectors of `model` under this key scheme are stored by."""
    return f"{model}+k{SCHEME}"


@dataclass(frozen=True)
class Said:
    """One turn with what its key needs: who spoke to whom, and when."""

    speaker: str
    content: str
    created_at: str
    addressee: str | None = None


# First and second person, each form with what follows the name in its place; one pass
# over the text for each person (the longer forms first), a quarter of the CPU of a pass
# for each form.
_FIRST = re.compile(r"\b(?:I'm|I've|I'll|I'd|I|[Mm]yself|[Mm]ine|[Mm]y|[Mm]e)\b")
_FIRST_AS = {"i'm": " is", "i've": " has", "i'll": " will", "i'd": " would", "i": "",
             "myself": "", "mine": "'s", "my": "'s", "me": ""}
_SECOND = re.compile(r"\b(?:you're|you've|you'll|you'd|yourself|yours|your|you)\b",
                     re.IGNORECASE)
_SECOND_AS = {"you're": " is", "you've": " has", "you'll": " will", "you'd": " would",
              "yourself": "", "yours": "'s", "your": "'s", "you": ""}


def in_names(text: str, speaker: str, addressee: str | None) -> str:
    """First person as the speaker's name, second person as the addressee's."""
    text = _FIRST.sub(lambda m: speaker + _FIRST_AS[m.group().lower()], text)
    if addressee:
        text = _SECOND.sub(lambda m: addressee + _SECOND_AS[m.group().lower()], text)
    return text


def dated(text: str, created_at: str) -> str:
    """The text with its relative dates resolved against the day it was said."""
    day = day_of(created_at)
    return resolve(text, day) if day is not None else text


# A pasted page is indexed by all its words, but neither carried whole into its
# neighbours' entries nor into a vector no embedder reads to the end (the local model reads
# 256 tokens, OpenAI's 8,191): a 1 MB turn cost a pass 15 s of CPU, rewritten 8 times.
VECTOR_CHARS = 8_000
NEIGHBOUR_CHARS = 2_000


def body(turn: Said, limit: int | None = None) -> str:
    """The turn's words as its key carries them (its first `limit` characters): names for
    pronouns, dates for "yesterday"."""
    content = turn.content if limit is None else turn.content[:limit]
    if len(content) <= NEIGHBOUR_CHARS and getattr(_indexing, "on", False):
        return _rewritten(content, turn.created_at, turn.speaker, turn.addressee)
    return _rewrite(content, turn.created_at, turn.speaker, turn.addressee)


def _rewrite(content: str, created_at: str, speaker: str, addressee: str | None) -> str:
    return in_names(dated(content, created_at), speaker, addressee)


# In the embed job a turn's words are rewritten for its vector key, its own words entry
# and each neighbour's: once is enough (about a quarter of the job's CPU). Short turns
# only, so the cache stays small (at most ~4 MB); used only inside `rewriting_once` and
# emptied when it ends, so no turn's words stay in memory past the job that read them
# (nor in a server that embeds the turns it is given).
_rewritten = functools.lru_cache(maxsize=1024)(_rewrite)
_indexing = threading.local()


@contextlib.contextmanager
def rewriting_once() -> Iterator[None]:
    """On this thread, until it ends: each short turn's words rewritten once, then kept
    for its other keys; forgotten at the end."""
    _indexing.on = True
    try:
        yield
    finally:
        _indexing.on = False
        _rewritten.cache_clear()


def turn_key(turn: Said, day_said: bool = True, limit: int | None = None) -> str:
    """The key: the day said (for the words index; a vector key without it measured
    better, 87.7 vs 86.1 R@10 on the LoCoMo dev slice), speaker, addressee, body."""
    day = day_of(turn.created_at) if day_said else None
    when = f"{long_date(day)}. " if day is not None else ""
    to = f" (to {turn.addressee})" if turn.addressee else ""
    return f"{when}{turn.speaker}{to}: {body(turn, limit)}"


def vector_key(turn: Said) -> str:
    """What a turn's vector is made from: its key without the day it was said."""
    return turn_key(turn, day_said=False, limit=VECTOR_CHARS)


def context_text(turn: Said, before: Said | None, after: Said | None) -> str:
    """What the words index holds for a turn: its key, with the turns either side of it
    in the session (an answer often names its topic only in the question before it)."""
    parts = [turn_key(turn)]
    parts += [f"{n.speaker}: {body(n, NEIGHBOUR_CHARS)}" for n in (before, after)
              if n is not None]
    return "\n".join(parts)


def addressee(speaker: str, before: str | None, after: str | None) -> str | None:
    """Whom a turn speaks to: the speaker of the turn before it, if someone else, or else
    of the turn after it."""
    return next((s for s in (before, after) if s is not None and s != speaker), None)

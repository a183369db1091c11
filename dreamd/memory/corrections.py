"""A person's word on one fact: correct, retract, pin, unpin, add, revert, and its history.

Each operation is one short write that checks the fact is the user's and (with
`expected_version`) unchanged since the caller read it, sets the fact's state and keeps
the correction as a row of its own (who, when, what, why). The user's tiers are queued
for a rebuild, and every derived text that says what the person withdrew is rewritten
at once (`scrub`), each text in a write of its own, conditional on it being unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dreamd.dream.word import EMPTIED, Word, read_word, scrubbed
from dreamd.errors import NotCorrectable, StaleVersion, UnknownCorrection, UnknownFact
from dreamd.ids import user_key
from dreamd.models import Correction, Fact
from dreamd.store import corrections as sql
from dreamd.store.facts import add_fact, facts_of
from dreamd.store.interface import Conn, Store
from dreamd.store.vectors import put_vector
from dreamd.text.facts import MAX_CHARS

PERSON = "person"  # who speaks when the caller names no one
ACTIONS = ("correct", "retract", "pin", "unpin", "add", "revert")


@dataclass(frozen=True)
class Said:
    """Who speaks, when and why; `vector` the new words' embedding under `model` (made
    before the write: the model never runs inside a transaction)."""

    by: str
    at: str
    why: str | None = None
    vector: bytes | None = None
    model: str = ""


def words(statement: str) -> str:
    """A person's words for a fact, checked: one line, 1..MAX_CHARS characters."""
    text = " ".join(statement.split())
    if not text:
        raise NotCorrectable("the new words are empty")
    if len(text) > MAX_CHARS:
        raise NotCorrectable(f"a fact is at most {MAX_CHARS} characters, got {len(text)}")
    return text


def who(by: str | None) -> str:
    name = " ".join((by or PERSON).split())[:80]
    return name or PERSON


def _fact(conn: Conn, user: str, fact_id: int, expected_version: int | None) -> Fact:
    """The user's fact as it stands, or UnknownFact (none, or another user's: the two are
    not told apart); StaleVersion when it moved past `expected_version`."""
    fact = sql.fact_by_id(conn, fact_id)
    if fact is None or fact.user_id != user:
        raise UnknownFact(f"user {user!r} has no fact {fact_id}")
    if expected_version is not None and fact.version != expected_version:
        raise StaleVersion(f"fact {fact_id} is at version {fact.version}, not "
                           f"{expected_version}: it changed since it was read",
                           fact.version)
    return fact


def _current(fact: Fact, action: str) -> None:
    if fact.withdrawn is not None:
        raise NotCorrectable(f"fact {fact.id} was {fact.withdrawn}: revert that first")
    if fact.replaced_by is not None and action != "retract":
        raise NotCorrectable(f"fact {fact.id} was replaced by fact {fact.replaced_by}; "
                             f"{action} that one")


def correct(store: Store, user: str, fact_id: int, statement: str, said: Said,
            expected_version: int | None = None) -> Fact:
    """New words replace the fact; the old one is kept as history, corrected by a person.
    Returns the new fact."""
    text = words(statement)
    with store.write(user_key(user)) as conn:
        old = _fact(conn, user, fact_id, expected_version)
        _current(old, "correct")
        if text == old.statement:
            raise NotCorrectable(f"fact {fact_id} says that already")
        new_id = _person_fact(conn, user, old.subject, old.about, text, old.valid_from, said)
        sql.set_fact(conn, old.id, old.version, withdrawn="corrected", replaced_by=new_id,
                     word_at=said.at)
        if old.pinned:  # the pin stays with the fact in its new words
            sql.set_fact(conn, new_id, 1, pinned=1)
        sql.add_correction(conn, user, old.id, "correct", said.by, said.why, said.at,
                           old=old.statement, new=text, new_fact=new_id)
        fact = sql.fact_by_id(conn, new_id)
    assert fact is not None
    scrub(store, user)
    return fact


def _person_fact(conn: Conn, user: str, subject: str, about: str | None, text: str,
                 valid_from: str | None, said: Said) -> int:
    fact_id = add_fact(conn, user, subject, about, text, valid_from, said.at, [],
                       f"{PERSON}:{said.by}", word_at=said.at)
    if said.vector is not None:
        put_vector(conn, said.model, "fact", str(fact_id), said.vector)
    return fact_id


def add(store: Store, user: str, subject: str, statement: str, said: Said,
        about: str | None = None) -> Fact:
    """A fact the person states, with no turn behind it."""
    text = words(statement)
    subject = " ".join(subject.split())
    if not subject:
        raise NotCorrectable("a fact needs a subject: whom it is about")
    with store.write(user_key(user)) as conn:
        fact_id = _person_fact(conn, user, subject, about, text, said.at[:10], said)
        sql.add_correction(conn, user, fact_id, "add", said.by, said.why, said.at, new=text,
                           new_fact=fact_id)
        fact = sql.fact_by_id(conn, fact_id)
    assert fact is not None
    return fact


def retract(store: Store, user: str, fact_id: int, said: Said,
            expected_version: int | None = None) -> Fact:
    """The fact is wrong: it leaves every tier, and no producer makes it again from the
    turns the person had when they said so."""
    with store.write(user_key(user)) as conn:
        fact = _fact(conn, user, fact_id, expected_version)
        _current(fact, "retract")
        sql.set_fact(conn, fact.id, fact.version, withdrawn="retracted", word_at=said.at)
        sql.add_correction(conn, user, fact.id, "retract", said.by, said.why, said.at,
                           old=fact.statement)
        done = sql.fact_by_id(conn, fact_id)
    assert done is not None
    scrub(store, user)
    return done


def pin(store: Store, user: str, fact_id: int, said: Said, pinned: bool = True,
        expected_version: int | None = None) -> Fact:
    """A pinned fact is in the profile and the context block whatever the ranking."""
    action = "pin" if pinned else "unpin"
    with store.write(user_key(user)) as conn:
        fact = _fact(conn, user, fact_id, expected_version)
        _current(fact, action)
        if fact.pinned == pinned:
            raise NotCorrectable(f"fact {fact_id} is {'already' if pinned else 'not'} pinned")
        sql.set_fact(conn, fact.id, fact.version, pinned=int(pinned), word_at=said.at)
        sql.add_correction(conn, user, fact.id, action, said.by, said.why, said.at)
        done = sql.fact_by_id(conn, fact_id)
    assert done is not None
    return done


def history(store: Store, user: str, fact_id: int) -> list[Correction]:
    """Every correction of the fact and of the facts a correction made of it or it was
    made from, oldest first."""
    with store.read() as conn:
        _fact(conn, user, fact_id, None)
        ids: set[int] = {fact_id}
        while True:
            found = sql.corrections_of_facts(conn, sorted(ids))
            linked = ids | {c.fact_id for c in found} | {
                c.new_fact for c in found if c.new_fact is not None}
            if linked == ids:
                return found
            ids = linked


def revert(store: Store, user: str, correction_id: int, said: Said) -> Correction:
    """Undo a correction (a revert is itself a correction, and is not undone: correct
    again instead). Returns the revert's row."""
    with store.write(user_key(user)) as conn:
        done = sql.correction_by_id(conn, correction_id)
        if done is None or done.user_id != user:
            raise UnknownCorrection(f"user {user!r} has no correction {correction_id}")
        if done.action == "revert" or done.reverted_by is not None:
            raise NotCorrectable(f"correction {correction_id} is a revert or was reverted "
                                 "already: correct the fact instead")
        _undo(conn, user, done, said)
        revert_id = sql.add_correction(conn, user, done.fact_id, "revert", said.by, said.why,
                                       said.at, reverts=done.id)
        sql.mark_reverted(conn, done.id, revert_id)
        row = sql.correction_by_id(conn, revert_id)
    assert row is not None
    scrub(store, user)
    return row


def _undo(conn: Conn, user: str, done: Correction, said: Said) -> None:
    fact = _fact(conn, user, done.fact_id, None)
    if done.action == "retract":
        sql.set_fact(conn, fact.id, fact.version, withdrawn=None, word_at=said.at)
    elif done.action in ("pin", "unpin"):
        sql.set_fact(conn, fact.id, fact.version, pinned=int(done.action == "unpin"),
                     word_at=said.at)
    else:  # correct, add: the person's fact goes to history, the old one (if any) is back
        assert done.new_fact is not None
        made = _fact(conn, user, done.new_fact, None)
        if not made.current:
            raise NotCorrectable(f"fact {made.id}, which correction {done.id} made, has "
                                 "changed since: correct it instead")
        sql.set_fact(conn, made.id, made.version, withdrawn="reverted", word_at=said.at)
        if done.action == "correct":
            sql.set_fact(conn, fact.id, fact.version, withdrawn=None, replaced_by=None,
                         valid_to=None, word_at=said.at)


def word_of(conn: Conn, user: str, current: list[Fact] | None = None) -> Word:
    """The user's word as it stands (with their current facts, when the caller has them)."""
    return read_word(conn, user, facts_of(conn, user, current_only=True)
                     if current is None else current)


REBUILT = ("profile", "eras", "narrative")


def scrub(store: Store, user: str) -> int:
    """Every derived text of the user's that no pass rebuilds and that says what they
    withdrew (gists, the diary), rewritten without it, and every stored model answer that
    says it dropped: read, then one short conditional write per text. Returns how many
    changed. (The profile, eras and narrative are rebuilt by the next pass, which the
    correction made due; until then the context block keeps the word as it reads them.)"""
    with store.read() as conn:
        word = word_of(conn, user)
        texts = sql.user_texts(conn, user) if word.unsaid else []
    changed = 0
    for table, key, text in texts:
        if table in REBUILT:
            continue
        kept = scrubbed(text, word)
        if kept == text:
            continue
        with store.write(user_key(user)) as conn:
            changed += sql.rewrite_text(conn, table, key, text, kept or EMPTIED)
    return changed + scrub_diary(store, user, word)


def scrub_diary(store: Store, user: str, word: Word) -> int:
    """The diary's profile lines that say what the person withdrew, masked."""
    if not word.unsaid:
        return 0
    with store.read() as conn:
        lines = sql.diary_lines(conn, user)
    changed = 0
    for line_id, _, detail in lines:
        data = json.loads(detail)
        said = data.get("lines")
        if not isinstance(said, list):
            continue
        kept = [ln if scrubbed(ln, word) == ln else "(withdrawn by a person)" for ln in said]
        if kept != said:
            with store.write(user_key(user)) as conn:
                sql.rewrite_diary_line(conn, line_id, json.dumps({**data, "lines": kept},
                                                                 sort_keys=True))
            changed += 1
    return changed


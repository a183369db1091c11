"""A person's word through the library: the `Memory` methods that list a user's facts
and correct, retract, pin, unpin, add and revert one (dreamd.memory.corrections)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from dreamd.backends.protocols import Embedder
from dreamd.config import Config
from dreamd.errors import NotCorrectable
from dreamd.memory import corrections
from dreamd.memory.serial import serialized
from dreamd.memory.users import require_user
from dreamd.models import Correction, Fact
from dreamd.store.facts import listed_facts
from dreamd.store.interface import Store
from dreamd.store.state import to_blob
from dreamd.text.keys import space


class Steering:
    """What a person may do to a user's facts; the errors are one line each: UnknownFact
    (no such fact, or another user's), UnknownCorrection, StaleVersion (the fact moved
    past `expected_version`), NotCorrectable, UnknownUser."""

    config: Config
    store: Store
    _lock: threading.RLock

    @property
    def embedder(self) -> Embedder:
        raise NotImplementedError

    @serialized
    def facts(self, user: str, *, after_id: int = 0, limit: int = 100,
              history: bool = False) -> list[Fact]:
        """A page of the user's facts by id, after `after_id` (a cursor: the last id of
        the page before): current ones, or with `history` those replaced and withdrawn
        too. Each carries its `version`, for a change that must not overwrite another."""
        if limit < 1:
            raise NotCorrectable(f"limit must be at least 1, got {limit}")
        with self.store.read() as conn:
            require_user(conn, user)
            return listed_facts(conn, user, after_id, min(limit, 1000), history)

    @serialized
    def correct(self, user: str, fact_id: int, statement: str, *, by: str = "person",
                why: str | None = None, expected_version: int | None = None) -> Fact:
        """New words for one of the user's facts (UnknownFact: not theirs or none;
        StaleVersion: it moved past `expected_version`). Returns the new fact; the old one
        is kept as history, marked corrected."""
        said = self._said(by, why, corrections.words(statement))
        return corrections.correct(self.store, user, fact_id, statement, said,
                                   expected_version)

    @serialized
    def retract(self, user: str, fact_id: int, *, by: str = "person", why: str | None = None,
                expected_version: int | None = None) -> Fact:
        """The fact is wrong: it leaves every tier, the context block and recall, and is
        not made again from the turns there were when it was retracted."""
        return corrections.retract(self.store, user, fact_id, self._said(by, why),
                                   expected_version)

    @serialized
    def pin(self, user: str, fact_id: int, *, by: str = "person", why: str | None = None,
            expected_version: int | None = None) -> Fact:
        """The fact is in the profile and the context block whatever the ranking."""
        return corrections.pin(self.store, user, fact_id, self._said(by, why), True,
                               expected_version)

    @serialized
    def unpin(self, user: str, fact_id: int, *, by: str = "person", why: str | None = None,
              expected_version: int | None = None) -> Fact:
        return corrections.pin(self.store, user, fact_id, self._said(by, why), False,
                               expected_version)

    @serialized
    def add_fact(self, user: str, statement: str, *, subject: str | None = None,
                 about: str | None = None, by: str = "person",
                 why: str | None = None) -> Fact:
        """A fact the person states, with no turn behind it; about the user (by their
        name) unless `subject` names someone else."""
        with self.store.read() as conn:
            require_user(conn, user)
        if about not in (None, "job", "home", "partner"):
            raise NotCorrectable(f"about must be job, home or partner, got {about!r}")
        said = self._said(by, why, corrections.words(statement))
        return corrections.add(self.store, user, subject or self._name(user), statement, said,
                               about)

    @serialized
    def history(self, user: str, fact_id: int) -> list[Correction]:
        """Every correction of the fact (and of the facts it was corrected into or from)."""
        return corrections.history(self.store, user, fact_id)

    @serialized
    def revert(self, user: str, correction_id: int, *, by: str = "person",
               why: str | None = None) -> Correction:
        """Undo one correction (UnknownCorrection: not the user's or none). Returns the
        revert, itself a correction."""
        return corrections.revert(self.store, user, correction_id, self._said(by, why))

    def _said(self, by: str | None, why: str | None, new: str | None = None
              ) -> corrections.Said:
        """Who speaks and when; the new words' vector made now, outside any transaction."""
        vector = to_blob(self.embedder.embed([new])[0]) if new else None
        reason = " ".join((why or "").split())[:500] or None
        return corrections.Said(corrections.who(by), datetime.now(UTC).isoformat(), reason,
                                vector, space(self.embedder.model))

    def _name(self, user: str) -> str:
        return self.config.user.name if user == self.config.user.id else user

"""What the API takes and gives, as pydantic models: the OpenAPI document is written
from them, and the MCP tools check their arguments with the same ones."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Ids as apps write them ("session-42", "locomo:conv-26:3", an email address, "team/ana"):
# printable, no surrounding space, at most 200 characters, and not "." or ".." (which a
# URL's path cannot carry). Spelled out, not with \s or a lookahead, so that it means the
# same in Python, in pydantic's Rust engine and in ECMA-262 (the generated clients' regex).
_END = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_NOT_DOT = _END[:2] + "." + _END[2:]
_MID = r"[^\x00-\x1f\x7f]"
ID = (f"^(?:{_NOT_DOT}|{_NOT_DOT}{_END}|\\.{_NOT_DOT}|{_END}{_MID}{{1,198}}{_END})$")
Id = Annotated[str, Field(pattern=ID, min_length=1, max_length=200)]
ROLE = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
# What a turn says: something other than white space, and no NUL.
CONTENT = f"^[^\\x00]*?{_END}[^\\x00]*$"
# A day, or a moment (ISO 8601): what `before` and `created_at` take. Months, days, hours
# and minutes in their ranges, so that what the pattern admits the server takes (but for
# the 31st of a short month, the 29th of February outside a leap year, and a zone that
# pushes year 1 or 9999 past what UTC can hold).
_DAY = (r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(?:(?:0[13578]|1[02])-"
        r"(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-"
        r"(?:0[1-9]|1[0-9]|2[0-9]))")
_TIME = (r"T(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
         r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?")
WHEN = f"^{_DAY}(?:{_TIME})?$"
MOMENT = f"^{_DAY}{_TIME}$"
# What a pattern means, for the one line a refusal says.
MEANING = {ID: "an id: printable, at most 200 characters, no space around it, not . or ..",
           ROLE: "a role: a letter, then letters, digits, - or _",
           CONTENT: "text with something other than white space, and no NUL character",
           WHEN: "a day (YYYY-MM-DD) or an ISO 8601 time",
           MOMENT: "an ISO 8601 time (YYYY-MM-DDTHH:MM[:SS][zone])"}


class TurnIn(BaseModel):
    """One turn, as the app's own INSERT would write it."""

    user: Id | None = Field(None, description="Whose session this is: a new session is "
                            "filed under this user (default: the unfiled default user).")
    session: Id
    role: str = Field(pattern=ROLE, description="Who spoke: user, assistant, ...")
    content: str = Field(min_length=1, pattern=CONTENT)
    created_at: datetime | None = Field(None, description="ISO 8601; UTC when it names no "
                                        "zone; now when left out.",
                                        json_schema_extra=lambda schema: schema.update(
                                            anyOf=[{"type": "string", "pattern": MOMENT},
                                                   {"type": "null"}]))

    @field_validator("created_at", mode="before")
    @classmethod
    def written_out(cls, value: object) -> object:
        """A time as the pattern says (pydantic alone would take a number, or a day)."""
        if value is not None and not (isinstance(value, str) and re.match(MOMENT, value)):
            raise ValueError(f"must be {MEANING[MOMENT]}")
        return value

    @field_validator("created_at")
    @classmethod
    def in_utc(cls, value: datetime | None) -> datetime | None:
        """A time in UTC (without a zone it is UTC: an API has no local time to assume);
        one that UTC cannot hold (year 1 at +14:00) is refused here, not by a crash later."""
        if value is None:
            return None
        try:
            return value.replace(tzinfo=value.tzinfo or UTC).astimezone(UTC)
        except OverflowError:
            raise ValueError("the time is out of range in UTC") from None


class TurnsIn(BaseModel):
    turns: list[TurnIn] = Field(min_length=1)


class Stored(BaseModel):
    ids: list[int]


# What the API answers. The documents that grow with dreamd (a user's memory, the export,
# status) name their parts and admit more (`extra="allow"`): a client generated from an
# older document still reads them.
class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class Problem(BaseModel):
    """Every refusal and failure: one line for a person, never a traceback."""

    error: str = Field(description="What went wrong, in one line.")


class Health(BaseModel):
    ok: bool
    version: str


class Ready(BaseModel):
    ready: bool
    newest_turn: int = Field(description="The id of the newest turn in the store (0: none).")


class Hit(BaseModel):
    """A turn recall found."""

    id: int
    session: str | None
    role: str
    content: str
    created_at: str
    when: str = Field(description="The day it was said, as a person reads it.")
    score: float


class Recalled(BaseModel):
    user: str
    hits: list[Hit] = Field(description="Best first.")


class ContextBlock(BaseModel):
    user: str | None = Field(description="Whose memory it holds (null: no one's, for a "
                             "new conversation no user was named for).")
    session: str | None
    budget: int
    tokens: int = Field(description="Tokens the text takes (estimated), at most budget.")
    text: str = Field(description="The block to put in a prompt (empty when nothing is "
                      "known yet).")
    sections: dict[str, list[str]] = Field(description="The text's lines by tier.")


class UserTotals(BaseModel):
    sessions: int
    turns: int
    backlog: int = Field(description="Turns not yet in a gist.")


class Users(BaseModel):
    users: dict[str, UserTotals]
    uncounted_turns: int = Field(description="Turns newer than the last pass's count.")
    next: str | None = Field(description="Ask again with after= this for the next page "
                             "(null: this was the last).")


class SessionTotals(BaseModel):
    session_id: str
    user_id: str
    turns: int
    unsummarized: int = Field(description="Turns not yet in a gist.")
    last_at: str | None


class Sessions(BaseModel):
    sessions: list[SessionTotals]
    uncounted_turns: int = Field(description="Turns newer than the last pass's count.")
    next: str | None = Field(description="Ask again with after= this for the next page "
                             "(null: this was the last).")


class UserMemory(Loose):
    """What dreamd keeps about a user (`dreamd show`), with every fact."""

    user: str
    profile: str | None
    narrative: str | None
    eras: list[dict[str, Any]]
    facts: list[dict[str, Any]]
    gists: dict[str, Any]
    self_state: dict[str, Any] | None


class Export(Loose):
    """Everything stored about a user (the `dreamd export` document)."""

    format: str
    user: str


class Forgotten(BaseModel):
    """What an erasure took (or, as a dry run, would take)."""

    user: str
    session: str | None
    before: str | None
    dry_run: bool
    turns: int
    sessions_emptied: list[str]
    sessions_trimmed: list[str]
    gists: int
    derived: list[str]
    wal_truncated: bool | None
    vacuumed: bool


class Status(Loose):
    """`dreamd status --json`: backlog, drives, the last passes, workers, failures."""


class Remembered(BaseModel):
    id: int = Field(description="The stored turn's id.")


class FactOut(BaseModel):
    """One statement about a person, with when it held, where it came from, and a
    person's word on it."""

    id: int
    subject: str
    about: str | None = Field(description="What a newer fact of the subject replaces: "
                              "job, home, partner (null: nothing).")
    statement: str
    current: bool = Field(description="Neither replaced nor withdrawn.")
    since: str | None = Field(description="The day it became true, when known.")
    learned_at: str
    until: str | None = Field(description="When a newer fact replaced it.")
    replaced_by: int | None
    from_turns: list[int] = Field(description="The turns it came from (none: a person "
                                  "stated it).")
    origin: str = Field(description="Who made it: llm:…, extractive:…, person:<who>.")
    version: int = Field(description="Send it back with a change: a change to a fact that "
                         "moved since is refused (412).")
    pinned: bool
    withdrawn: str | None = Field(description="retracted, corrected or reverted: kept as "
                                  "history, in no tier.")


class Facts(BaseModel):
    user: str
    facts: list[FactOut]
    next: int | None = Field(description="Ask again with after= this for the next page "
                             "(null: this was the last).")


Statement = Annotated[str, Field(min_length=1, max_length=300, pattern=CONTENT,
                                 description="The fact in a sentence.")]
Why = Annotated[str | None, Field(None, max_length=500, description="Why, for the history.")]


class NewFact(BaseModel):
    """A fact the person states, with no turn behind it."""

    statement: Statement
    subject: Annotated[str | None, Field(None, min_length=1, max_length=200,
                                         pattern=CONTENT, description=(
                                             "Whom it is about (default: the user)."))]
    about: Literal["job", "home", "partner"] | None = Field(
        None, description="What it replaces when a newer one comes.")
    why: Why = None


class Correcting(BaseModel):
    """New words for a fact; the old ones stay in its history."""

    statement: Statement
    version: int = Field(ge=1, description="The version read: a stale one is refused (412).")
    why: Why = None


class Change(BaseModel):
    """A retraction, a pin or an unpin."""

    version: int | None = Field(None, ge=1, description="The version read: a stale one is "
                                "refused (412); left out, the change applies to the fact as "
                                "it is.")
    why: Why = None


class Reverting(BaseModel):
    why: Why = None


class CorrectionOut(BaseModel):
    """A person's word on one fact, as its own row."""

    id: int
    fact_id: int
    action: str = Field(description="correct, retract, pin, unpin, add or revert.")
    made_by: str
    why: str | None
    made_at: str
    old: str | None
    new: str | None
    new_fact: int | None
    reverts: int | None
    reverted_by: int | None


class History(BaseModel):
    user: str
    fact_id: int
    corrections: list[CorrectionOut]

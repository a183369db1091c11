"""What the API takes and gives, as pydantic models: the OpenAPI document is written
from them, and the MCP tools check their arguments with the same ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

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


class TurnIn(BaseModel):
    """One turn, as the app's own INSERT would write it."""

    user: Id | None = Field(None, description="Whose session this is: a new session is "
                            "filed under this user (default: the unfiled default user).")
    session: Id
    role: str = Field(pattern=ROLE, description="Who spoke: user, assistant, ...")
    content: str = Field(min_length=1)
    created_at: datetime | None = Field(None, description="ISO 8601; UTC when it names no "
                                        "zone; now when left out.")

    @field_validator("content")
    @classmethod
    def said_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is only white space")
        if "\x00" in value:
            raise ValueError("content holds a NUL character")
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

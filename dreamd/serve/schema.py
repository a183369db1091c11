"""What the API takes and gives, as pydantic models: the OpenAPI document is written
from them, and the MCP tools check their arguments with the same ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

# Ids as apps write them ("session-42", "locomo:conv-26:3", an email address): printable,
# no surrounding space, at most 200 characters.
ID = r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]{0,198}[^\s\x00-\x1f\x7f])?$"
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


class TurnsIn(BaseModel):
    turns: list[TurnIn] = Field(min_length=1)


class Stored(BaseModel):
    ids: list[int]


def utc(when: datetime | None) -> datetime | None:
    """A time without a zone is UTC (an API has no local time to assume)."""
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when

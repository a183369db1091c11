"""A history to import: sessions of turns with their real dates, as every importer's
parser returns them, and the small helpers the parsers share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class ImportTurn:
    role: str
    content: str
    created_at: str


@dataclass(frozen=True)
class ImportSession:
    session_id: str
    name: str | None
    turns: tuple[ImportTurn, ...]
    # Why this session is left out of the import (it is reported, not written).
    skip: str | None = None


def iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def spaced(start: datetime, texts: list[tuple[str, str]]) -> tuple[ImportTurn, ...]:
    """Turns of a session known only by its start: one minute apart, in order."""
    return tuple(ImportTurn(role, text, iso(start + timedelta(minutes=i)))
                 for i, (role, text) in enumerate(texts))


def as_object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: exports vary in shape."""
    return value if isinstance(value, dict) else {}

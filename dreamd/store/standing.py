"""Where the file stands, in one statement: the turns', the tally's, the embedding's, the
words index's and reflection's marks, and whether any user's tiers wait."""

from __future__ import annotations

from dataclasses import dataclass

from dreamd.store.interface import Conn
from dreamd.store.tiers import REFLECTION_MARKS, ReflectionMarks, parse_reflection_marks
from dreamd.store.turns import MARK_COLUMNS, MARKS, Marks, marks_of


@dataclass(frozen=True)
class Standing:
    """Where the turns, the tally, the embedding, the words index and reflection stand,
    and whether any user's tiers wait."""

    marks: Marks
    reflected: ReflectionMarks
    tiers_queued: bool


def standing(conn: Conn, space: str, agent_id: str) -> Standing:
    """The file's marks (see turns.MARKS and REFLECTION_MARKS): one statement."""
    row = conn.execute(f"SELECT {MARKS}, {REFLECTION_MARKS}, "
                       "(SELECT COUNT(*) FROM dreamd_tier_queue)", (space, agent_id)).fetchone()
    n = MARK_COLUMNS
    return Standing(marks_of(conn, row[:n]), parse_reflection_marks(row[n], row[n + 1]),
                    row[n + 2] > 0)

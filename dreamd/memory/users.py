"""Which users and sessions a memory file holds, and the check that catches a typo."""

from __future__ import annotations

from typing import Any

from dreamd.errors import UnknownUser
from dreamd.store.interface import Conn, Store
from dreamd.store.turns import (
    known_users,
    newest_turn_id,
    session_counts,
    sessions_of,
    tally_watermark,
)

SHOWN = 20  # known users listed in an error


def require_user(conn: Conn, user: str, session: str | None = None) -> None:
    """Refuse a user (or one of their sessions) the file does not know: a privacy request
    with a typo must not quietly do nothing. The operator is told who is there; an API
    caller is not (`UnknownUser.for_operator`)."""
    known = known_users(conn)
    if user not in known:
        listed = ", ".join(known[:SHOWN]) + (f" and {len(known) - SHOWN} more"
                                            if len(known) > SHOWN else "")
        raise UnknownUser(f"no user {user!r} in this memory file", listed or "none yet")
    if session is not None and session not in sessions_of(conn, [user]):
        raise UnknownUser(f"user {user!r} has no session {session!r} "
                          f"(dreamd sessions --user {user} lists them)")


def sessions(store: Store, user: str | None = None) -> dict[str, Any]:
    """What `dreamd sessions` shows: each session's turns and backlog (as of the last
    pass's count), and how many newer turns no pass has counted yet."""
    with store.read() as conn:
        if user is not None:
            require_user(conn, user)
        rows = session_counts(conn, user)
        uncounted = max(0, newest_turn_id(conn) - tally_watermark(conn))
    return {"sessions": [r.__dict__ for r in rows], "uncounted_turns": uncounted}


def users(store: Store) -> dict[str, Any]:
    """What `dreamd users` shows: per user, sessions, turns and turns not yet in a gist."""
    listing = sessions(store)
    totals: dict[str, dict[str, int]] = {}
    for row in listing["sessions"]:
        t = totals.setdefault(row["user_id"], {"sessions": 0, "turns": 0, "backlog": 0})
        t["sessions"] += 1
        t["turns"] += row["turns"]
        t["backlog"] += row["unsummarized"]
    return {"users": totals, "uncounted_turns": listing["uncounted_turns"]}

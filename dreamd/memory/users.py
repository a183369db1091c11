"""Which users and sessions a memory file holds, and the check that catches a typo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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
T = TypeVar("T")


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


def sessions(store: Store, user: str | None = None, *, after: str | None = None,
             limit: int | None = None) -> dict[str, Any]:
    """What `dreamd sessions` shows: each session's turns and backlog (as of the last
    pass's count), and how many newer turns no pass has counted yet. With `limit`, one
    user's sessions by id, `limit` of them after `after`, and `next` while more remain."""
    with store.read() as conn:
        if user is not None:
            require_user(conn, user)
        rows = session_counts(conn, user)
        uncounted = max(0, newest_turn_id(conn) - tally_watermark(conn))
    listed = [r.__dict__ for r in rows]
    page: dict[str, Any] = {}
    if limit is not None:
        listed, page["next"] = _page(sorted(listed, key=lambda r: r["session_id"]),
                                     lambda r: r["session_id"], after, limit)
    return {"sessions": listed, "uncounted_turns": uncounted, **page}


def users(store: Store, *, after: str | None = None, limit: int | None = None
          ) -> dict[str, Any]:
    """What `dreamd users` shows: per user, sessions, turns and turns not yet in a gist.
    With `limit`, the users by id, `limit` of them after `after`, and `next` while more
    remain."""
    listing = sessions(store)
    totals: dict[str, dict[str, int]] = {}
    for row in listing["sessions"]:
        t = totals.setdefault(row["user_id"], {"sessions": 0, "turns": 0, "backlog": 0})
        t["sessions"] += 1
        t["turns"] += row["turns"]
        t["backlog"] += row["unsummarized"]
    page: dict[str, Any] = {}
    if limit is not None:
        kept, page["next"] = _page(sorted(totals), lambda name: name, after, limit)
        totals = {name: totals[name] for name in kept}
    return {"users": totals, "uncounted_turns": listing["uncounted_turns"], **page}


def _page(ordered: list[T], key: Callable[[T], str], after: str | None, limit: int
          ) -> tuple[list[T], str | None]:
    """`limit` items after the one keyed `after`, and the key to ask for the next page
    from (None: this was the last). A cursor is a key, so a page stays right while items
    come and go before it."""
    rest = [item for item in ordered if after is None or key(item) > after]
    return rest[:limit], key(rest[limit - 1]) if len(rest) > limit else None

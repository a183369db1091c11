"""Queues of what changed, so that a pass costs what changed rather than what the store
holds: users whose tiers may be behind their gists (dreamd queues them with the gist,
and on forget), and sessions rows the app added or moved (a trigger on `sessions`
queues them inside the app's own INSERT or UPDATE)."""

from __future__ import annotations

from dreamd.store.interface import Conn, Store
from dreamd.store.state import of_users


def queue_tiers(conn: Conn, user_id: str) -> None:
    """The user's profile, eras or narrative may now be behind their gists: sensing and
    the tier jobs look at queued users only, so their cost follows what changed."""
    conn.execute("INSERT INTO dreamd_tier_queue (user_id) VALUES (?) ON CONFLICT DO NOTHING",
                 (user_id,))


def tier_queue(conn: Conn, users: list[str] | None = None) -> list[str]:
    """Queued users (of `users`, when given)."""
    where, params = of_users("user_id", users)
    rows = conn.execute(f"SELECT user_id FROM dreamd_tier_queue WHERE 1 = 1{where} "
                        "ORDER BY user_id", params)
    return [str(r[0]) for r in rows]


def owners_queued(store: Store) -> bool:
    """Whether any sessions row waits to be compared, by a read of its own."""
    return bool(store.peek("SELECT 1 FROM dreamd_owner_queue LIMIT 1"))


def owner_changes(conn: Conn, limit: int = 500
                  ) -> tuple[list[tuple[str, str]], list[tuple[str, int]]]:
    """Among up to `limit` sessions rows the app added or moved since they were last
    looked at (a trigger on `sessions` queues them): (session id, the app's user id) where
    the row names another owner than the tally; and the queue entries looked at."""
    queued = [(str(r[0]), int(r[1])) for r in conn.execute(
        "SELECT session_id, n FROM dreamd_owner_queue ORDER BY session_id LIMIT ?", (limit,))]
    if not queued:
        return [], []
    marks = ",".join("?" * len(queued))
    changes = [(str(r[0]), str(r[1])) for r in conn.execute(
        "SELECT s.id, s.user_id FROM sessions s JOIN dreamd_sessions d "
        f"ON d.session_id = s.id WHERE d.user_id != s.user_id AND s.id IN ({marks})",
        [sid for sid, _ in queued])]
    return changes, queued


def unqueue_owners(conn: Conn, entries: list[tuple[str, int]]) -> None:
    """Take looked-at entries off the queue, unless the app moved the session again since
    (PostgreSQL's trigger counts each move in `n`; SQLite's writers take turns)."""
    conn.executemany("DELETE FROM dreamd_owner_queue WHERE session_id = ? AND n = ?",
                     entries)

"""The app's tables as dreamd reads and writes them: turns, sessions, and the session tally."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dreamd.ids import (
    DEFAULT_USER,
)
from dreamd.models import Turn
from dreamd.store.interface import Conn, Store, dialect
from dreamd.store.state import (
    column_required,
    get_state,
    iso_utc,
    move_state,
    of_users,
)


def tally_watermark(conn: Conn) -> int:
    return int(get_state(conn, "tally_id", "0") or 0)


def new_exchange_groups(
    conn: Conn, after_id: int, upto_id: int
) -> list[tuple[Any, ...]]:
    """Per-session counts of exchanges with after_id < id <= upto_id (a rowid range scan)."""
    return conn.execute(
        "SELECT e.session_id, COALESCE(MAX(s.user_id), ?), COUNT(*), MIN(e.id), MAX(e.id), "
        "MIN(e.created_at), MAX(e.created_at) "
        "FROM exchanges e LEFT JOIN sessions s ON s.id = e.session_id "
        "WHERE e.id > ? AND e.id <= ? GROUP BY e.session_id",
        (DEFAULT_USER, after_id, upto_id),
    ).fetchall()


def claim_tally(conn: Conn, after_id: int, upto_id: int) -> bool:
    """Inside a write, first: move the tally's watermark from `after_id` to `upto_id`;
    False when another dreamd moved it meanwhile (its fold counted these turns). One
    statement checks and moves it, so of two dreamds folding the same turns one waits
    for the other's commit and then finds the mark moved."""
    return move_state(conn, "tally_id", after_id, upto_id)


def apply_tally(conn: Conn, groups: list[tuple[Any, ...]]) -> None:
    """Fold these per-session counts in (after `claim_tally`), in the order of the
    sessions' ids (see `fallback.send_back`)."""
    for session_id, user_id, turns, first_id, last_id, raw_first, raw_last in sorted(groups):
        first_at, last_at = iso_utc(raw_first), iso_utc(raw_last)
        conn.execute(
            "INSERT INTO dreamd_sessions (session_id, user_id, turns, first_id, last_id, "
            "first_at, last_at, month, summarized_id, summarized_turns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, substr(?, 1, 7), "
            "COALESCE((SELECT last_exchange_id FROM summaries WHERE session_id = ?), 0), "
            # An adopted gist: count the turns it already covers (index range, once).
            "(SELECT COUNT(*) FROM exchanges x WHERE x.session_id = ? AND x.id <= "
            "COALESCE((SELECT last_exchange_id FROM summaries WHERE session_id = ?), 0))) "
            "ON CONFLICT(session_id) DO UPDATE SET "
            "turns = dreamd_sessions.turns + excluded.turns, "
            "last_id = CASE WHEN excluded.last_id > dreamd_sessions.last_id "
            "THEN excluded.last_id ELSE dreamd_sessions.last_id END, "
            "last_at = CASE WHEN excluded.last_at > dreamd_sessions.last_at "
            "THEN excluded.last_at ELSE dreamd_sessions.last_at END",
            (session_id, user_id, turns, first_id, last_id, first_at, last_at, first_at,
             session_id, session_id, session_id),
        )


@dataclass(frozen=True)
class TallyRow:
    turns: int
    summarized_turns: int
    summarized_id: int
    last_at: str


def tally_rows(conn: Conn, session_ids: list[str], chunk: int = 500
               ) -> dict[str, TallyRow]:
    """The tally of these sessions (those it has), by primary key."""
    out: dict[str, TallyRow] = {}
    for start in range(0, len(session_ids), chunk):
        part = session_ids[start : start + chunk]
        rows = conn.execute(
            "SELECT session_id, turns, summarized_turns, summarized_id, last_at FROM "
            f"dreamd_sessions WHERE session_id IN ({','.join('?' * len(part))})", part)
        out.update({r[0]: TallyRow(*r[1:]) for r in rows})
    return out


def raw_counts(conn: Conn) -> tuple[int, int]:
    """Turns and sessions in the app's own table, before dreamd has a tally (one scan)."""
    dialect(conn).require_turns(conn)
    row = conn.execute("SELECT COUNT(*), COUNT(DISTINCT session_id) FROM exchanges").fetchone()
    return int(row[0]), int(row[1])


def newest_turn_id(conn: Conn) -> int:
    """The newest turn committed, settled or not: enough to know that turns arrived."""
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM exchanges").fetchone()[0])


def max_exchange_id(conn: Conn) -> int:
    """The newest turn dreamd may read: on PostgreSQL, the newest settled one (see
    `Store.settle_turns`)."""
    return dialect(conn).readable(conn, newest_turn_id(conn))


@dataclass(frozen=True)
class Marks:
    newest: int  # the newest turn dreamd may read (see max_exchange_id)
    tallied: int  # the tally's watermark
    embedded: int  # the embed watermark of the model's space
    indexed: int  # the words index's watermark


def marks(conn: Conn, space: str | None = None) -> Marks:
    """Where the turns, the tally, (for a vector space) the embedding and the words index
    stand, in one round trip."""
    return marks_of(conn, conn.execute(f"SELECT {MARKS}", (space,)).fetchone())


# The marks as columns another statement may carry (the space its one parameter).
MARKS = ("(SELECT COALESCE(MAX(id), 0) FROM exchanges), "
         "(SELECT value FROM dreamd_state WHERE key = 'tally_id'), "
         "(SELECT last_exchange_id FROM dreamd_embed_state WHERE model = ?), "
         "(SELECT value FROM dreamd_state WHERE key = 'fts_id')")
MARK_COLUMNS = 4


def marks_of(conn: Conn, row: Any) -> Marks:
    """Marks from MARKS' columns, as read on `conn`."""
    return Marks(dialect(conn).readable(conn, int(row[0])), int(row[1] or 0), int(row[2] or 0),
                 int(row[3] or 0))


def tally_mark(store: Store) -> int:
    """The tally's watermark, by a read of its own (`Store.peek`)."""
    rows = store.peek("SELECT value FROM dreamd_state WHERE key = 'tally_id'")
    return int(rows[0][0]) if rows and rows[0][0] else 0


def counts_after(conn: Conn, turn_marks: list[int], gist_mark: int) -> tuple[list[int], int]:
    """Turns past each of `turn_marks`, and gists past `gist_mark`, over every user: one
    round trip. Each mark is sent as a value, so the planner sees how far back it is."""
    row = conn.execute(
        "SELECT " + "".join("(SELECT COUNT(*) FROM exchanges WHERE id > ?), " for _ in turn_marks)
        + "(SELECT COUNT(*) FROM summaries WHERE dreamd_seq > ?)",
        (*turn_marks, gist_mark)).fetchone()
    return [int(v) for v in row[:-1]], int(row[-1])


@dataclass(frozen=True)
class DirtySession:
    session_id: str
    user_id: str
    turns: int
    last_id: int
    last_at: str
    month: str
    summarized_id: int
    summarized_turns: int

    @property
    def unsummarized(self) -> int:
        return self.turns - self.summarized_turns


def dirty_sessions(conn: Conn) -> list[DirtySession]:
    """Every user's sessions with turns past their gist, through the partial index."""
    rows = conn.execute(
        "SELECT session_id, user_id, turns, last_id, last_at, month, summarized_id, "
        "summarized_turns FROM dreamd_sessions "
        "WHERE last_id > summarized_id ORDER BY last_at"
    ).fetchall()
    return [DirtySession(*r) for r in rows]


@dataclass(frozen=True)
class DirtyTotals:
    dirty: int
    unsummarized: int
    ripe: int
    idle_ripe: int
    idle_ripe_turns: int


RIPE = "CASE WHEN summarized_id = 0 OR turns - summarized_turns >= ? THEN 1 ELSE 0 END"


@dataclass(frozen=True)
class SessionTotals:
    """Sensing's counts: the tally's sessions, the dirty ones' totals, and the turns
    counted that the facts job has not read."""

    sessions: int
    dirty: DirtyTotals
    unread: int


def session_totals(conn: Conn, ripe_after: int, idle_before: str,
                   users: list[str] | None = None) -> SessionTotals:
    """The totals for every user (or for `users`), in one statement that reads only what
    waits: each user's count of sessions (kept by triggers, migration 15), the dirty
    sessions through their partial index and the unread ones through theirs. What is
    consolidated is never read, however much of it the store holds."""
    scope, params = of_users("user_id", users)
    row = conn.execute(
        f"SELECT (SELECT COALESCE(SUM(sessions), 0) FROM dreamd_user_sessions WHERE 1 = 1{scope}), "
        "dirty.*, (SELECT COALESCE(SUM(turns - facts_turns), 0) FROM dreamd_sessions "
        f"WHERE last_id > facts_id{scope}) FROM ("
        "SELECT COUNT(*), COALESCE(SUM(turns - summarized_turns), 0), COALESCE(SUM(ripe), 0), "
        "COALESCE(SUM(CASE WHEN ripe = 1 AND last_at <= ? THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(CASE WHEN ripe = 1 AND last_at <= ? THEN turns - summarized_turns "
        f"ELSE 0 END), 0) FROM (SELECT turns, summarized_turns, last_at, {RIPE} AS ripe "
        f"FROM dreamd_sessions WHERE last_id > summarized_id{scope}) AS waiting) AS dirty",
        (*params, *params, idle_before, idle_before, ripe_after, *params)).fetchone()
    sessions, *dirty, unread = (int(v) for v in row)
    return SessionTotals(sessions, DirtyTotals(*dirty), unread)


def backlog_by_user(conn: Conn, limit: int = 10) -> tuple[int, list[tuple[str, int, int]]]:
    """Users with turns not yet in a gist, from the tally's partial index: how many, and
    the `limit` with the most such turns as (user, sessions, turns)."""
    rows = conn.execute(
        "SELECT user_id, COUNT(*), SUM(turns - summarized_turns) FROM dreamd_sessions "
        "WHERE last_id > summarized_id GROUP BY user_id ORDER BY 3 DESC, 1").fetchall()
    return len(rows), [(str(r[0]), int(r[1]), int(r[2])) for r in rows[:limit]]


def count_sessions(conn: Conn, user_id: str | None = None) -> int:
    """Sessions in the tally: one user's, or everyone's."""
    if user_id is None:
        return int(conn.execute("SELECT COUNT(*) FROM dreamd_sessions").fetchone()[0])
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM dreamd_sessions WHERE user_id = ?", (user_id,)
        ).fetchone()[0]
    )


def known_users(conn: Conn) -> list[str]:
    """Users the file knows: named by the app's sessions rows or filed by the tally."""
    rows = conn.execute("SELECT user_id FROM sessions WHERE user_id IS NOT NULL UNION "
                        "SELECT user_id FROM dreamd_sessions ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


@dataclass(frozen=True)
class SessionCount:
    session_id: str
    user_id: str
    turns: int
    unsummarized: int
    last_at: str | None


def session_counts(conn: Conn, user_id: str | None = None
                   ) -> list[SessionCount]:
    """Each session with its turns and backlog as of the last pass's tally (sessions the
    app created that have no turns yet show 0)."""
    rows = conn.execute(
        "SELECT session_id, user_id, turns, turns - summarized_turns, last_at "
        "FROM dreamd_sessions WHERE ?1 IS NULL OR user_id = ?1 UNION ALL "
        "SELECT id, COALESCE(user_id, ?2), 0, 0, NULL FROM sessions s "
        "WHERE (?1 IS NULL OR COALESCE(user_id, ?2) = ?1) AND NOT EXISTS "
        "(SELECT 1 FROM dreamd_sessions t WHERE t.session_id = s.id) "
        "ORDER BY 2, 5 DESC", (user_id, DEFAULT_USER)).fetchall()
    return [SessionCount(*r) for r in rows]


def session_owner(conn: Conn, session_id: str) -> str:
    """Whose session this is: its sessions row, else the tally, else the default user."""
    row = conn.execute(
        "SELECT COALESCE((SELECT user_id FROM sessions WHERE id = ?1), "
        "(SELECT user_id FROM dreamd_sessions WHERE session_id = ?1), ?2)",
        (session_id, DEFAULT_USER),
    ).fetchone()
    return str(row[0])


def filed_owner(conn: Conn, session_id: str) -> str | None:
    """Whose session this is, if anyone has said: its sessions row, else the tally."""
    row = conn.execute(
        "SELECT COALESCE((SELECT user_id FROM sessions WHERE id = ?1), "
        "(SELECT user_id FROM dreamd_sessions WHERE session_id = ?1))", (session_id,),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def sessions_of(conn: Conn, users: list[str], *, others: bool = False
                ) -> set[str]:
    """Sessions known to belong to these users (or, with `others`, to anyone else)."""
    marks = ",".join("?" * len(users))
    op = "NOT IN" if others else "IN"
    rows = conn.execute(
        f"SELECT id FROM sessions WHERE user_id {op} ({marks}) UNION "
        f"SELECT session_id FROM dreamd_sessions WHERE user_id {op} ({marks})",
        (*users, *users)).fetchall()
    return {r[0] for r in rows}


def session_turns(
    conn: Conn, session_id: str, after_id: int, upto_id: int, limit: int | None = None
) -> list[Turn]:
    """A session's turns in (after_id, upto_id], oldest first; the first `limit` of them
    when given."""
    rows = conn.execute(
        "SELECT id, session_id, role, content, created_at FROM exchanges "
        "WHERE session_id = ? AND id > ? AND id <= ? ORDER BY id"
        + (" LIMIT ?" if limit is not None else ""),
        (session_id, after_id, upto_id, *([limit] if limit is not None else [])),
    ).fetchall()
    return [Turn(*r) for r in rows]


def users_with_turns_after(conn: Conn, after_id: int) -> list[str]:
    """Users with a session that has a turn newer than `after_id`."""
    rows = conn.execute(
        "SELECT DISTINCT user_id FROM dreamd_sessions WHERE last_id > ? ORDER BY user_id",
        (after_id,),
    ).fetchall()
    return [r[0] for r in rows]


def recent_user_turns(
    conn: Conn, user_id: str, after_id: int, limit: int
) -> list[Turn]:
    rows = conn.execute(
        "SELECT e.id, e.session_id, e.role, e.content, e.created_at FROM exchanges e "
        "JOIN dreamd_sessions t ON t.session_id = e.session_id "
        "WHERE e.id > ? AND t.user_id = ? ORDER BY e.id DESC LIMIT ?",
        (after_id, user_id, limit),
    ).fetchall()
    return [Turn(*r) for r in reversed(rows)]


def count_user_turns_after(conn: Conn, user_id: str, after_id: int) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM exchanges e JOIN dreamd_sessions t ON t.session_id = e.session_id "
        "WHERE e.id > ? AND t.user_id = ?", (after_id, user_id)).fetchone()
    return int(row[0])


def session_months(conn: Conn, session_id: str) -> set[str]:
    """The months a session's turns and gist were filed under."""
    rows = conn.execute(
        "SELECT month FROM dreamd_sessions WHERE session_id = ?1 UNION "
        "SELECT dreamd_month FROM summaries WHERE session_id = ?1 AND dreamd_month IS NOT NULL",
        (session_id,)).fetchall()
    return {r[0] for r in rows}


def recount_session(conn: Conn, session_id: str) -> None:
    """Rebuild a session's tally row from the turns it has left (after a partial forget)."""
    row = conn.execute(
        "SELECT COUNT(*), MIN(id), MAX(id), MIN(created_at), MAX(created_at) FROM exchanges "
        "WHERE session_id = ?", (session_id,)).fetchone()
    first_at, last_at = iso_utc(row[3]), iso_utc(row[4])
    conn.execute(
        "UPDATE dreamd_sessions SET turns = ?, first_id = ?, last_id = ?, first_at = ?, "
        "last_at = ?, month = substr(?, 1, 7), summarized_id = 0, summarized_turns = 0, "
        "facts_turns = (SELECT COUNT(*) FROM exchanges x WHERE x.session_id = ? "
        "AND x.id <= dreamd_sessions.facts_id) WHERE session_id = ?",
        (row[0], row[1], row[2], first_at, last_at, first_at, session_id, session_id))


def add_turn(conn: Conn, session_id: str, role: str, content: str,
             created_at: str) -> int:
    """One turn as the app writes it; its id."""
    row = conn.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                       "VALUES (?, ?, ?, ?) RETURNING id",
                       (session_id, role, content, created_at)).fetchone()
    return int(row[0])


def last_turns(conn: Conn, session_id: str, n: int
               ) -> list[tuple[str, str, str]]:
    """(role, content, created_at) of a session's last `n` turns, oldest first."""
    rows = conn.execute("SELECT role, content, created_at FROM exchanges WHERE session_id = ? "
                        "ORDER BY id DESC LIMIT ?", (session_id, n)).fetchall()
    return [(r[0], r[1], r[2]) for r in reversed(rows)]


def sessions_of_turns(conn: Conn, ids: list[int]) -> list[tuple[int, str]]:
    """(id, session) of these turns, those the app still has."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, session_id FROM exchanges WHERE id IN ({marks})", ids)
    return [(int(r[0]), str(r[1])) for r in rows]


def turns_by_id(conn: Conn, ids: list[int]) -> dict[int, Turn]:
    """These turns, by id (those the app still has)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"SELECT id, session_id, role, content, created_at FROM exchanges "
                        f"WHERE id IN ({marks})", ids)
    return {int(r[0]): Turn(*r) for r in rows}


def app_embeds_turns(conn: Conn) -> bool:
    """Whether the app stores its own embedding with every turn (NOT NULL column)."""
    return column_required(conn, "exchanges", "embedding")


def add_session(conn: Conn, session_id: str, name: str | None, created_at: str,
                user_id: str) -> None:
    """The app's sessions row, unless it has one (an existing session keeps its owner)."""
    conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                 "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 (session_id, name, created_at, user_id))


def add_turns(conn: Conn, rows: list[tuple[str, str, str, str]]) -> None:
    """Turns as the app writes them: (session, role, content, created_at), plain text."""
    conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                     "VALUES (?, ?, ?, ?)", rows)


def turn_keys(conn: Conn, session_id: str) -> set[tuple[str, str, str]]:
    """(role, content, created_at) of a session's turns: what a re-import finds present."""
    rows = conn.execute("SELECT role, content, created_at FROM exchanges WHERE session_id = ?",
                        (session_id,))
    return {(r[0], r[1], r[2]) for r in rows}

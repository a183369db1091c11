"""The derived tiers: gists, profile, eras, narrative, self-state, and their inputs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dreamd.ids import (
    era_key,
    narrative_id,
    profile_id,
    self_state_id,
)
from dreamd.models import Gist
from dreamd.store.corrections import word_seq
from dreamd.store.interface import Conn
from dreamd.store.queues import queue_tiers, tier_queue
from dreamd.store.runs import drop_outputs
from dreamd.store.state import bump_vector_epoch, next_seq, set_state
from dreamd.store.turns import DirtySession
from dreamd.store.vectors import delete_vectors, put_vector


def summary_row(conn: Conn, session_id: str) -> tuple[str, int] | None:
    row = conn.execute(
        "SELECT content, last_exchange_id FROM summaries WHERE session_id = ?", (session_id,)
    ).fetchone()
    return (row[0], int(row[1])) if row else None


def save_gist(
    conn: Conn,
    *,
    session: DirtySession,
    content: str,
    last_exchange_id: int,
    turns_covered: int,
    source: str,
    created_at: str,
    embedding: bytes | None,
    vector: bytes | None,
    model: str,
) -> bool:
    """Store a gist if the session's watermark is still what the job read. Returns stored.

    The watermark check and its move are one UPDATE: the write lock is held for as few
    statements as possible, because the chat app waits behind it.
    """
    moved = conn.execute(
        "UPDATE dreamd_sessions SET summarized_id = ?, summarized_turns = ? "
        "WHERE session_id = ? AND summarized_id = ?",
        (last_exchange_id, turns_covered, session.session_id, session.summarized_id),
    ).rowcount
    if not moved:
        return False
    seq = next_seq(conn)
    conn.execute(
        "INSERT INTO summaries (session_id, content, embedding, last_exchange_id, created_at, "
        "user_id, dreamd_seq, dreamd_month, dreamd_turns, dreamd_source) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
        "content = excluded.content, embedding = excluded.embedding, "
        "last_exchange_id = excluded.last_exchange_id, created_at = excluded.created_at, "
        "user_id = excluded.user_id, dreamd_seq = excluded.dreamd_seq, "
        "dreamd_month = excluded.dreamd_month, dreamd_turns = excluded.dreamd_turns, "
        "dreamd_source = excluded.dreamd_source",
        (session.session_id, content, embedding, last_exchange_id, created_at, session.user_id,
         seq, session.month, turns_covered, source),
    )
    if vector is not None:
        put_vector(conn, model, "summary", session.session_id, vector)
    queue_tiers(conn, session.user_id)
    return True


def settle_tier_queue(conn: Conn, users: list[str] | None = None) -> int:
    """Inside a write: take the queued users (of `users`) whose tiers are all current off
    the queue; returns how many stay on it."""
    left = 0
    for user in tier_queue(conn, users):
        if gists_past_profile(conn, user) or stale_months(conn, user) or \
                narrative_stale(conn, user):
            left += 1
        else:
            conn.execute("DELETE FROM dreamd_tier_queue WHERE user_id = ?", (user,))
    return left


def gists_for_user(conn: Conn, user_id: str) -> list[Gist]:
    rows = conn.execute(
        "SELECT session_id, content, last_exchange_id, COALESCE(dreamd_month, ''), dreamd_seq "
        "FROM summaries WHERE user_id = ? ORDER BY dreamd_month, last_exchange_id",
        (user_id,),
    ).fetchall()
    return [Gist(*r) for r in rows]


def gists_for_month(conn: Conn, user_id: str, month: str) -> list[Gist]:
    rows = conn.execute(
        "SELECT session_id, content, last_exchange_id, dreamd_month, dreamd_seq "
        "FROM summaries WHERE user_id = ? AND dreamd_month = ? ORDER BY last_exchange_id",
        (user_id, month),
    ).fetchall()
    return [Gist(*r) for r in rows]


def max_gist_seq(conn: Conn, user_id: str | None) -> int:
    """The newest gist's seq: one user's, or (user_id None) anyone's."""
    if user_id is None:
        return int(conn.execute(
            "SELECT COALESCE(MAX(dreamd_seq), 0) FROM summaries").fetchone()[0])
    row = conn.execute(
        "SELECT COALESCE(MAX(dreamd_seq), 0) FROM summaries WHERE user_id = ?", (user_id,)
    ).fetchone()
    return int(row[0])


def count_gists(conn: Conn, user_id: str | None = None) -> int:
    if user_id is None:
        return int(conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])
    return int(
        conn.execute("SELECT COUNT(*) FROM summaries WHERE user_id = ?", (user_id,)).fetchone()[0]
    )


def count_gists_after(conn: Conn, user_id: str, seq: int) -> int:
    """One user's gists newer than `seq`."""
    return int(conn.execute("SELECT COUNT(*) FROM summaries WHERE user_id = ? AND dreamd_seq > ?",
                            (user_id, seq)).fetchone()[0])


def users_with_gists(conn: Conn) -> list[str]:
    """Every user who has a gist, by a skip-scan of the (user, seq) index: one seek each."""
    rows = conn.execute(
        "WITH RECURSIVE u(id) AS (SELECT MIN(user_id) FROM summaries "
        "UNION ALL SELECT (SELECT MIN(user_id) FROM summaries WHERE user_id > u.id) "
        "FROM u WHERE u.id IS NOT NULL) SELECT id FROM u WHERE id IS NOT NULL"
    ).fetchall()
    return [r[0] for r in rows]


def inputs_of(gists: list[Gist], previous: dict[str, int] | None = None) -> dict[str, int]:
    """Provenance of a tier: session -> the last turn of it that the tier was built from."""
    out = dict(previous or {})
    for g in gists:
        out[g.session_id] = max(out.get(g.session_id, 0), g.last_exchange_id)
    return out


def tier_inputs(conn: Conn, table: str, where: str, args: tuple[Any, ...]
                ) -> dict[str, int]:
    row = conn.execute(f"SELECT dreamd_inputs FROM {table} WHERE {where}", args).fetchone()
    try:
        data = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        data = {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def month_gist_seqs(conn: Conn, user_id: str) -> dict[str, int]:
    """month -> newest gist seq, by a skip-scan of the (user, month, seq) index.

    One index seek per month instead of a pass over every gist: sensing stays cheap when a
    user has tens of thousands of sessions.
    """
    rows = conn.execute(
        "WITH RECURSIVE m(month) AS ("
        " SELECT MIN(dreamd_month) FROM summaries WHERE user_id = ?1 AND dreamd_month IS NOT NULL"
        " UNION ALL SELECT (SELECT MIN(dreamd_month) FROM summaries"
        "  WHERE user_id = ?1 AND dreamd_month > m.month) FROM m WHERE m.month IS NOT NULL) "
        "SELECT month, (SELECT MAX(dreamd_seq) FROM summaries WHERE user_id = ?1 "
        "AND dreamd_month = m.month) FROM m WHERE month IS NOT NULL",
        (user_id,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def era_seqs(conn: Conn, user_id: str) -> dict[str, int]:
    """month -> the newest gist seq the era was built from."""
    rows = conn.execute("SELECT month, dreamd_seq FROM eras WHERE user_id = ?", (user_id,))
    return {r[0]: int(r[1]) for r in rows}


def stale_months(conn: Conn, user_id: str) -> list[str]:
    """Months with a gist newer than their era, or with no era yet, or (every month) an
    era older than the user's newest correction."""
    eras = era_seqs(conn, user_id)
    word = word_seq(conn, user_id)
    return sorted(m for m, seq in month_gist_seqs(conn, user_id).items()
                  if eras.get(m, -1) < max(seq, word))


@dataclass(frozen=True)
class Tier:
    """A single-row tier (profile or narrative) as dreamd sees it."""

    content: str
    seq: int
    updated_at: str
    source: str | None


def profile_row(conn: Conn, profile_id: str) -> Tier | None:
    row = conn.execute(
        "SELECT content, dreamd_seq, updated_at, dreamd_source FROM profile WHERE id = ?",
        (profile_id,),
    ).fetchone()
    return Tier(row[0], int(row[1]), row[2], row[3]) if row else None


def save_profile(
    conn: Conn, *, profile_id: str, user_id: str, content: str,
    sessions_covered: int, seq: int, expected_seq: int | None, source: str, now: str,
    inputs: dict[str, int],
) -> bool:
    current = profile_row(conn, profile_id)
    if (current.seq if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO profile (id, content, sessions_covered, updated_at, user_id, dreamd_seq, "
        "dreamd_source, dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
        "SET content = excluded.content, sessions_covered = excluded.sessions_covered, "
        "updated_at = excluded.updated_at, user_id = excluded.user_id, "
        "dreamd_seq = excluded.dreamd_seq, dreamd_source = excluded.dreamd_source, "
        "dreamd_inputs = excluded.dreamd_inputs",
        (profile_id, content, sessions_covered, now, user_id, seq, source,
         json.dumps(inputs, sort_keys=True)),
    )
    return True


def tier_sources(conn: Conn, user_id: str, profile_id: str, narrative_id: str
                 ) -> dict[tuple[str, str], str]:
    """Which backend made each of a user's tiers: ("gist", session), ("era", month),
    ("profile", id), ("narrative", id) -> e.g. "extractive:…" or "llm:gpt-4o-mini"."""
    rows = conn.execute(
        "SELECT 'gist', session_id, dreamd_source FROM summaries WHERE user_id = ?1 "
        "AND dreamd_source IS NOT NULL UNION ALL SELECT 'era', month, dreamd_source FROM "
        "eras WHERE user_id = ?1 AND dreamd_source IS NOT NULL UNION ALL "
        "SELECT 'profile', id, dreamd_source FROM profile WHERE id = ?2 UNION ALL "
        "SELECT 'narrative', id, dreamd_source FROM narrative WHERE id = ?3",
        (user_id, profile_id, narrative_id)).fetchall()
    return {(kind, key): source for kind, key, source in rows}


def eras_for_user(conn: Conn, user_id: str) -> list[tuple[str, str, int]]:
    """(month, content, seq) for every era, oldest first."""
    rows = conn.execute(
        "SELECT month, content, dreamd_seq FROM eras WHERE user_id = ? ORDER BY month",
        (user_id,),
    ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def save_era(
    conn: Conn, *, month: str, user_id: str, content: str, session_count: int,
    seq: int, expected_seq: int | None, source: str, now: str, embedding: bytes | None,
    vector: bytes | None, model: str, inputs: dict[str, int],
) -> bool:
    current = conn.execute("SELECT dreamd_seq FROM eras WHERE user_id = ? AND month = ?",
                           (user_id, month)).fetchone()
    if (int(current[0]) if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO eras (month, content, embedding, session_count, created_at, user_id, "
        "dreamd_seq, dreamd_source, dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(user_id, month) DO UPDATE "
        "SET content = excluded.content, embedding = excluded.embedding, "
        "session_count = excluded.session_count, created_at = excluded.created_at, "
        "dreamd_seq = excluded.dreamd_seq, dreamd_source = excluded.dreamd_source, "
        "dreamd_inputs = excluded.dreamd_inputs",
        (month, content, embedding, session_count, now, user_id, seq, source,
         json.dumps(inputs, sort_keys=True)),
    )
    if vector is not None:
        put_vector(conn, model, "era", era_key(user_id, month), vector)
    return True


def narrative_row(conn: Conn, narrative_id: str) -> Tier | None:
    row = conn.execute(
        "SELECT content, dreamd_seq, updated_at, dreamd_source FROM narrative WHERE id = ?",
        (narrative_id,),
    ).fetchone()
    return Tier(row[0], int(row[1]), row[2], row[3]) if row else None


def save_narrative(
    conn: Conn, *, narrative_id: str, user_id: str, content: str, seq: int,
    expected_seq: int | None, source: str, now: str, inputs: dict[str, int],
) -> bool:
    current = narrative_row(conn, narrative_id)
    if (current.seq if current else None) != expected_seq:
        return False
    conn.execute(
        "INSERT INTO narrative (id, content, updated_at, user_id, dreamd_seq, dreamd_source, "
        "dreamd_inputs) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
        "content = excluded.content, updated_at = excluded.updated_at, "
        "user_id = excluded.user_id, dreamd_seq = excluded.dreamd_seq, "
        "dreamd_source = excluded.dreamd_source, dreamd_inputs = excluded.dreamd_inputs",
        (narrative_id, content, now, user_id, seq, source, json.dumps(inputs, sort_keys=True)),
    )
    return True


def gists_past_profile(conn: Conn, user_id: str) -> int:
    """How many of the user's gists are newer than their profile (all, with none yet),
    one more when a person corrected a fact since it was built."""
    current = profile_row(conn, profile_id(user_id))
    seen = current.seq if current else 0
    return count_gists_after(conn, user_id, seen) + (word_seq(conn, user_id) > seen)


def narrative_stale(conn: Conn, user_id: str) -> bool:
    """Whether the user's profile or eras moved past their narrative."""
    inputs_seq = max_tier_seq(conn, user_id, profile_id(user_id))
    current = narrative_row(conn, narrative_id(user_id))
    return inputs_seq > 0 and (current is None or current.seq < inputs_seq)


def max_tier_seq(conn: Conn, user_id: str, profile_id: str) -> int:
    """The newest seq among the narrative's inputs: the profile and the eras."""
    row = conn.execute(
        "SELECT COALESCE((SELECT dreamd_seq FROM profile WHERE id = ?), 0), "
        "COALESCE((SELECT MAX(dreamd_seq) FROM eras WHERE user_id = ?), 0)",
        (profile_id, user_id),
    ).fetchone()
    return max(int(row[0]), int(row[1]))


def self_state(conn: Conn, agent_id: str) -> tuple[dict[str, Any], str] | None:
    row = conn.execute(
        "SELECT data, updated_at FROM self_state WHERE id = ?", (agent_id,)
    ).fetchone()
    return None if row is None else (loaded(row[0]), row[1])


def loaded(data: str) -> dict[str, Any]:
    """A self-state's JSON as a dict: {} where it is not one."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def save_self_state(
    conn: Conn, agent_id: str, data: dict[str, Any], now: str,
    expected_updated_at: str | None,
) -> bool:
    """The row written if it is still as it was read (`expected_updated_at`; None: no row
    yet). Every pass of every worker writes the agent's drives here, and reflect its
    state: one statement checks and writes, so of two writers one finds it changed."""
    text = json.dumps(data, sort_keys=True)
    if expected_updated_at is None:
        return conn.execute("INSERT INTO self_state (id, data, updated_at) VALUES (?, ?, ?) "
                            "ON CONFLICT(id) DO NOTHING", (agent_id, text, now)).rowcount == 1
    return conn.execute("UPDATE self_state SET data = ?, updated_at = ? WHERE id = ? "
                        "AND updated_at = ?",
                        (text, now, agent_id, expected_updated_at)).rowcount == 1


def drop_gist(conn: Conn, session_id: str) -> bool:
    """Delete a session's gist and its vectors; the tally's mark goes back to the start, so
    the next pass summarizes whatever turns remain. Returns whether a gist existed."""
    gone = conn.execute("DELETE FROM summaries WHERE session_id = ?", (session_id,)).rowcount
    delete_vectors(conn, "summary", session_id)
    drop_outputs(conn, "summarize", session_id)
    conn.execute("UPDATE dreamd_sessions SET summarized_id = 0, summarized_turns = 0 "
                 "WHERE session_id = ?", (session_id,))
    return bool(gone)


def drop_tiers(conn: Conn, user_id: str, agent_id: str, months: set[str]
               ) -> list[str]:
    """Delete what was built from a user's gists — profile, narrative, the eras of `months`,
    the agent's reflection state with that user — so the next pass rebuilds them from what
    remains. Returns what went, as "table:key"."""
    queue_tiers(conn, user_id)
    gone: list[str] = []
    for table, key, job in (("profile", profile_id(user_id), "profile"),
                            ("narrative", narrative_id(user_id), "narrative")):
        if conn.execute(f"DELETE FROM {table} WHERE id = ?", (key,)).rowcount:
            gone.append(f"{table}:{key}")
        drop_outputs(conn, job, key)
    for month in sorted(months):
        if conn.execute("DELETE FROM eras WHERE user_id = ? AND month = ?",
                        (user_id, month)).rowcount:
            gone.append(f"eras:{era_key(user_id, month)}")
        delete_vectors(conn, "era", era_key(user_id, month))
        drop_outputs(conn, "eras", era_key(user_id, month))
    key = self_state_id(agent_id, user_id)
    state = self_state(conn, key)
    if state is not None:
        data, _ = state
        kept = {k: v for k, v in data.items() if k == "drives"} if key == agent_id else {}
        if kept:
            conn.execute("UPDATE self_state SET data = ? WHERE id = ?",
                         (json.dumps(kept, sort_keys=True), key))
        else:
            conn.execute("DELETE FROM self_state WHERE id = ?", (key,))
        gone.append(f"self_state:{key}")
        # Move the agent's mark back before this user's remaining turns, so the next
        # reflect job builds the state again from what is left.
        first = conn.execute("SELECT MIN(first_id) FROM dreamd_sessions WHERE user_id = ?",
                             (user_id,)).fetchone()[0]
        marks = reflection_marks(conn, agent_id)
        if first is not None and marks.exchange_id >= first:
            save_reflection_marks(conn, ReflectionMarks(first - 1, 0, marks.at))
    drop_outputs(conn, "reflect", key)
    return gone


def rehome_session(conn: Conn, session_id: str, user_id: str, agent_id: str
                   ) -> bool:
    """The app says this session belongs to `user_id` but the tally filed it under someone
    else: move it, and drop what the other user's memory built from it. Returns whether
    anything moved."""
    row = conn.execute("SELECT user_id, month FROM dreamd_sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    if row is None or row[0] == user_id:
        return False
    old_user, month = row
    conn.execute("UPDATE dreamd_sessions SET user_id = ? WHERE session_id = ?",
                 (user_id, session_id))
    months = {m for (m,) in conn.execute(
        "SELECT dreamd_month FROM summaries WHERE session_id = ? AND dreamd_month IS NOT NULL",
        (session_id,))} | {month}
    if drop_gist(conn, session_id):
        drop_tiers(conn, old_user, agent_id, months)
    bump_vector_epoch(conn)  # each user's recall matrix holds only their sessions' turns
    return True


@dataclass(frozen=True)
class ReflectionMarks:
    exchange_id: int
    seq: int
    at: str | None


def reflection_marks(conn: Conn, agent_id: str) -> ReflectionMarks:
    """How far the agent's last complete reflect job reached, over every user.

    Kept in dreamd_state; a file from before per-user reflection has them in the agent's
    self-state row.
    """
    raw, old = conn.execute(f"SELECT {REFLECTION_MARKS}", (agent_id,)).fetchone()
    return parse_reflection_marks(raw, old)


# Where reflection's marks are kept (see `reflection_marks`), as columns another statement
# may carry; the agent's id its one parameter.
REFLECTION_MARKS = ("(SELECT value FROM dreamd_state WHERE key = 'reflected'), "
                    "(SELECT data FROM self_state WHERE id = ?)")


def parse_reflection_marks(raw: str | None, old: Any) -> ReflectionMarks:
    """The marks from REFLECTION_MARKS' two columns."""
    if raw is None:
        state = loaded(old) if old is not None else {}
        marks = state.get("dreamd") or {}
    else:
        marks = json.loads(raw)
    return ReflectionMarks(int(marks.get("reflected_exchange_id", 0)),
                           int(marks.get("reflected_seq", 0)), marks.get("reflected_at"))


def save_reflection_marks(conn: Conn, marks: ReflectionMarks) -> None:
    set_state(conn, "reflected", json.dumps({
        "reflected_exchange_id": marks.exchange_id, "reflected_seq": marks.seq,
        "reflected_at": marks.at}, sort_keys=True))


def tiers_present(conn: Conn, user_id: str, agent_id: str, months: set[str]
                  ) -> list[str]:
    """What drop_tiers would delete, as "table:key" (for a dry run)."""
    out = []
    for table, key in (("profile", profile_id(user_id)), ("narrative", narrative_id(user_id))):
        if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (key,)).fetchone():
            out.append(f"{table}:{key}")
    eras = era_seqs(conn, user_id)
    out += [f"eras:{era_key(user_id, m)}" for m in sorted(months) if m in eras]
    if self_state(conn, self_state_id(agent_id, user_id)) is not None:
        out.append(f"self_state:{self_state_id(agent_id, user_id)}")
    return out


def gist_texts(conn: Conn, sessions: list[str]) -> dict[str, str]:
    """session -> "month gist" for these sessions' gists."""
    if not sessions:
        return {}
    marks = ",".join("?" * len(sessions))
    return dict(conn.execute(
        f"SELECT session_id, COALESCE(dreamd_month, '') || ' ' || content FROM summaries "
        f"WHERE session_id IN ({marks})", sessions).fetchall())

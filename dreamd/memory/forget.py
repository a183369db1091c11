"""Forget: erase a user's turns in a scope, and everything dreamd derived from them.

The sequence, each step safe to crash in:

1. Read what the scope holds (after folding new turns into the tally): the sessions, the
   turns up to the newest id now (`upto`; turns that arrive meanwhile are kept), the
   months they touch.
2. One short IMMEDIATE transaction drops what was derived from them: the gists of those
   sessions (a session with turns left is summarized again by the next pass), the user's
   profile and narrative, the eras of the touched months, the agent's reflection state
   with the user, their stored LLM outputs. It bumps the vector epoch, so a pass that
   prepared work before now saves none of it, and writes the journal (the scope and a
   cursor) in `dreamd_state`.
3. The turns go with their vectors and full-text rows, `STEP` turns looked at per
   transaction (10-40 ms of write lock each in `make bench`, so the chat app never
   waits long), the cursor moving in the same transaction. All of this runs with
   `secure_delete` on, so freed bytes are zeroed.
4. The full-text index is merged into one segment, which is what drops the deleted
   words from it: FTS5 `merge` of `MERGE_PAGES` pages per transaction until nothing is
   left to merge, then `optimize` (nearly free by then) with the journal's end.
5. Checkpoints: the WAL still holds the old page images until SQLite resets it, so a
   TRUNCATE checkpoint is tried after the passive one (it succeeds when no other
   connection is reading); `vacuum` also rewrites the whole file.

While a journal is open, every pass finishes it (`finish_pending`) before anything else,
so if dreamd stops in step 3 or 4, the next pass or forget completes the forget. The next
pass then re-derives what remains: gists of sessions that kept turns, then the user's
profile, eras and narrative from the gists still there.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dreamd.errors import ConfigError
from dreamd.memory.users import require_user
from dreamd.store import queries as q
from dreamd.store.connect import Store
from dreamd.store.tally import sync_tally

STEP = 500  # turns looked at per deleting transaction: ~35-55 us a turn of write lock
MERGE_PAGES = 50  # full-text index pages merged per transaction: under ~10 ms
JOURNAL, JOURNAL_SESSIONS = "forget_pending", "forget_sessions"


@dataclass(frozen=True)
class Scope:
    user: str
    session: str | None = None
    before: str | None = None  # ISO-8601 UTC; turns made strictly before it

    def describe(self) -> str:
        parts = [f"user {self.user!r}"]
        if self.session is not None:
            parts.append(f"session {self.session!r}")
        if self.before is not None:
            parts.append(f"turns before {self.before}")
        return ", ".join(parts)


def parse_before(text: str) -> str:
    """A --before value (a date or a timestamp) as ISO UTC text; one clear error if not."""
    normal = q.iso_utc(text)
    try:
        datetime.fromisoformat(normal)
    except ValueError:
        raise ConfigError(f"--before: {text!r} is not a date (YYYY-MM-DD) or ISO timestamp"
                          ) from None
    return normal


@dataclass
class Report:
    scope: Scope
    dry_run: bool
    turns: int = 0
    sessions_emptied: list[str] = field(default_factory=list)
    sessions_trimmed: list[str] = field(default_factory=list)
    gists: int = 0
    derived: list[str] = field(default_factory=list)
    wal_truncated: bool | None = None
    vacuumed: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "user": self.scope.user, "session": self.scope.session, "before": self.scope.before,
            "dry_run": self.dry_run, "turns": self.turns,
            "sessions_emptied": self.sessions_emptied, "sessions_trimmed": self.sessions_trimmed,
            "gists": self.gists, "derived": self.derived, "wal_truncated": self.wal_truncated,
            "vacuumed": self.vacuumed,
        }


def _in_scope(conn: sqlite3.Connection, scope: Scope) -> dict[str, list[int]]:
    """session -> ids of its turns in scope, for the user's sessions."""
    sessions = sorted(q.sessions_of(conn, [scope.user]))
    if scope.session is not None:
        sessions = [s for s in sessions if s == scope.session]
    out: dict[str, list[int]] = {}
    for session in sessions:
        rows = conn.execute("SELECT id, created_at FROM exchanges WHERE session_id = ?",
                            (session,)).fetchall()
        ids = [int(i) for i, at in rows if _before(scope.before, at)]
        if ids or scope.before is None:
            out[session] = ids
    return out


def _before(cutoff: str | None, created_at: str) -> bool:
    return cutoff is None or q.iso_utc(created_at) < cutoff


def _survey(conn: sqlite3.Connection, scope: Scope, report: Report) -> tuple[list[str], set[str]]:
    """Read only: fill the report's counts; return the touched sessions and months."""
    touched = _in_scope(conn, scope)
    months: set[str] = set()
    for session, ids in touched.items():
        report.turns += len(ids)
        months |= q.session_months(conn, session)
        left = conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id = ?",
                            (session,)).fetchone()[0] - len(ids)
        (report.sessions_emptied if left == 0 else report.sessions_trimmed).append(session)
        report.gists += conn.execute("SELECT 1 FROM summaries WHERE session_id = ?",
                                     (session,)).fetchone() is not None
    if scope.session is None and scope.before is None:
        months |= set(q.era_seqs(conn, scope.user))
    return sorted(touched), months


def _delete_ids(conn: sqlite3.Connection, ids: list[int], models: list[str]) -> None:
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    conn.execute(f"DELETE FROM exchanges WHERE id IN ({marks})", ids)
    for model in models:  # by the full key: an index seek per turn, not a scan
        conn.execute(f"DELETE FROM dreamd_exchange_vectors WHERE model = ? "
                     f"AND exchange_id IN ({marks})", (model, *ids))
    conn.execute(f"DELETE FROM dreamd_fts WHERE rowid IN ({marks})", ids)


def _settle_session(conn: sqlite3.Connection, session: str) -> None:
    """A session whose turns in scope are gone: forgotten entirely, or recounted."""
    if conn.execute("SELECT 1 FROM exchanges WHERE session_id = ? LIMIT 1",
                    (session,)).fetchone() is None:
        conn.execute("DELETE FROM dreamd_sessions WHERE session_id = ?", (session,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
    else:
        q.recount_session(conn, session)


def _delete_step(conn: sqlite3.Connection, job: dict[str, Any], sessions: list[str],
                 step: int) -> None:
    """Inside a write: delete the next turns in scope, looking at `step` at most; move the
    journal's cursor (session index `next`, last id looked at `after`)."""
    models = q.vector_models(conn, "dreamd_exchange_vectors")
    budget = step
    while budget > 0 and job["next"] < len(sessions):
        session = sessions[job["next"]]
        rows = conn.execute(
            "SELECT id, created_at FROM exchanges WHERE session_id = ? AND id > ? "
            "AND id <= ? ORDER BY id LIMIT ?", (session, job["after"], job["upto"], budget),
        ).fetchall()
        _delete_ids(conn, [int(i) for i, at in rows if _before(job["before"], at)], models)
        if len(rows) < budget:
            _settle_session(conn, session)
            job["next"], job["after"] = job["next"] + 1, 0
        else:
            job["after"] = int(rows[-1][0])
        budget -= len(rows)


def _open(store: Store, scope: Scope, agent_id: str, report: Report, sessions: list[str],
          months: set[str], upto: int) -> bool:
    """Step 2: drop what was derived and open the journal, unless one is open already
    (returns False then, having changed nothing)."""
    job = {"user": scope.user, "before": scope.before, "upto": upto, "next": 0, "after": 0}
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        with store.write() as conn:
            if q.get_state(conn, JOURNAL) is not None:
                return False
            for session in sessions:
                q.drop_gist(conn, session)
            report.derived = q.drop_tiers(conn, scope.user, agent_id, months)
            q.bump_vector_epoch(conn)
            q.set_state(conn, JOURNAL_SESSIONS, json.dumps(sessions))
            q.set_state(conn, JOURNAL, json.dumps(job))
    finally:
        store.conn.execute("PRAGMA secure_delete = OFF")
    return True


def forget(store: Store, scope: Scope, agent_id: str, *, dry_run: bool = False,
           vacuum: bool = False, step: int = STEP) -> Report:
    """Erase `scope` (see the module's docstring for the sequence). A dry run reads only."""
    whole_user = scope.session is None and scope.before is None
    if not vacuum:  # a vacuum after an earlier forget may name a user no longer here
        with store.read() as conn:
            require_user(conn, scope.user, scope.session)
    while True:
        report = Report(scope, dry_run)
        if not dry_run:
            finish_pending(store, step)  # an earlier forget first: one journal at a time
            sync_tally(store)  # the tally must know every session the user has
        with store.read() as conn:
            upto = q.max_exchange_id(conn)
            sessions, months = _survey(conn, scope, report)
            if dry_run and (sessions or whole_user):
                report.derived = q.tiers_present(conn, scope.user, agent_id, months)
        if dry_run or not (sessions or whole_user) or _open(store, scope, agent_id, report,
                                                             sessions, months, upto):
            break
        # Another dreamd opened a forget in between: finish it, then look again.
    if dry_run:
        return report
    finish_pending(store, step)
    report.wal_truncated = store.checkpoint_truncate()
    if vacuum:
        store.conn.execute("VACUUM")
        report.vacuumed = True
        report.wal_truncated = store.checkpoint_truncate()
    return report


def open_journal(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """An unfinished forget, as status shows it: whose, and how many sessions are left."""
    raw = q.get_state(conn, JOURNAL)
    if raw is None:
        return None
    job: dict[str, Any] = json.loads(raw) if raw != "1" else {"user": None, "next": 0}
    sessions = len(json.loads(q.get_state(conn, JOURNAL_SESSIONS) or "[]"))
    return {"user": job["user"], "sessions": sessions,
            "sessions_left": max(0, sessions - int(job["next"]))}


def finish_pending(store: Store, step: int = STEP) -> bool:
    """Carry an open forget journal to its end: delete the rest of its turns, a step per
    transaction, then merge the full-text index. Returns whether there was one."""
    with store.read() as conn:
        if q.get_state(conn, JOURNAL) is None:
            return False
    secure = store.conn.execute("PRAGMA secure_delete").fetchone()[0]
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        while True:
            with store.write() as conn:
                raw = q.get_state(conn, JOURNAL)
                if raw is None:  # another dreamd finished it
                    break
                # "1": a journal of the first release, whose turns went in one transaction.
                job = json.loads(raw) if raw != "1" else None
                sessions = json.loads(q.get_state(conn, JOURNAL_SESSIONS) or "[]")
                if job is not None and job["next"] < len(sessions):
                    _delete_step(conn, job, sessions, step)
                    q.set_state(conn, JOURNAL, json.dumps(job))
                    continue
                # Merge the index's segments a few pages at a time (FTS5: a delta of
                # total_changes under 2 means the merge found nothing left to do) ...
                before = conn.total_changes
                conn.execute("INSERT INTO dreamd_fts (dreamd_fts, rank) VALUES ('merge', ?)",
                             (-MERGE_PAGES,))
                if conn.total_changes - before >= 2:
                    continue
                # ... then `optimize`, nearly free by now, makes sure it is one segment.
                conn.execute("INSERT INTO dreamd_fts (dreamd_fts) VALUES ('optimize')")
                conn.execute("DELETE FROM dreamd_state WHERE key IN (?, ?)",
                             (JOURNAL, JOURNAL_SESSIONS))
                break
    finally:
        store.conn.execute(f"PRAGMA secure_delete = {int(secure)}")
    # The WAL still holds the forgotten pages' old images: empty it if nobody is using
    # the file right now (the forget command then tries again, waiting its turn).
    store.checkpoint_truncate(wait=False)
    return True

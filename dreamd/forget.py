"""Forget: erase a user's turns in a scope, and everything dreamd derived from them.

The sequence, each step safe to crash in:

1. One short IMMEDIATE transaction, with `secure_delete` on so freed bytes are zeroed:
   fold any new turns into the tally, delete the turns in scope with their vectors and
   full-text rows, drop the gists of the sessions they were in (a session with turns left
   is summarized again by the next pass), the user's profile, narrative, the eras of the
   touched months and the agent's reflection state with the user, and their stored LLM
   outputs; mark the forget pending. All of it or none of it lands.
2. A second transaction merges the full-text index (FTS5 `optimize`), which is what
   drops the deleted words from its segments, then clears the pending mark. If dreamd
   stops before this, the next pass (or forget) finishes it.
3. Checkpoints: the WAL still holds the old page images until SQLite resets it, so a
   TRUNCATE checkpoint is tried after the passive one (it succeeds when no other
   connection is reading); `vacuum` also rewrites the whole file.

The next pass re-derives what remains: gists of sessions that kept turns, then the
user's profile, eras and narrative from the gists still there.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import datetime

from dreamd.errors import ConfigError
from dreamd.store import queries as q
from dreamd.store.connect import Store

CHUNK = 500


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


def _fold_new_turns(conn: sqlite3.Connection) -> None:
    """Inside the forget's transaction: the tally knows every session there is."""
    after, newest = q.tally_watermark(conn), q.max_exchange_id(conn)
    if newest > after:
        q.apply_tally(conn, q.new_exchange_groups(conn, after, newest), newest)


def _in_scope(conn: sqlite3.Connection, scope: Scope) -> dict[str, list[int]]:
    """session -> ids of its turns in scope, for the user's sessions."""
    sessions = sorted(q.sessions_of(conn, [scope.user]))
    if scope.session is not None:
        sessions = [s for s in sessions if s == scope.session]
    out: dict[str, list[int]] = {}
    for session in sessions:
        rows = conn.execute("SELECT id, created_at FROM exchanges WHERE session_id = ?",
                            (session,)).fetchall()
        ids = [int(i) for i, at in rows
               if scope.before is None or q.iso_utc(at) < scope.before]
        if ids or scope.before is None:
            out[session] = ids
    return out


def _delete_ids(conn: sqlite3.Connection, ids: list[int]) -> None:
    models = q.vector_models(conn, "dreamd_exchange_vectors")
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        marks = ",".join("?" * len(chunk))
        conn.execute(f"DELETE FROM exchanges WHERE id IN ({marks})", chunk)
        for model in models:  # by the full key: an index seek per turn, not a scan
            conn.execute(f"DELETE FROM dreamd_exchange_vectors WHERE model = ? "
                         f"AND exchange_id IN ({marks})", (model, *chunk))
        conn.execute(f"DELETE FROM dreamd_fts WHERE rowid IN ({marks})", chunk)


def _erase(conn: sqlite3.Connection, scope: Scope, agent_id: str, report: Report) -> None:
    if not report.dry_run:
        _fold_new_turns(conn)
    touched = _in_scope(conn, scope)
    whole_user = scope.session is None and scope.before is None
    months: set[str] = set()
    for session, ids in touched.items():
        report.turns += len(ids)
        months |= q.session_months(conn, session)
        left = conn.execute("SELECT COUNT(*) FROM exchanges WHERE session_id = ?",
                            (session,)).fetchone()[0] - len(ids)
        if not report.dry_run:
            _delete_ids(conn, ids)
        (report.sessions_emptied if left == 0 else report.sessions_trimmed).append(session)
        has_gist = conn.execute("SELECT 1 FROM summaries WHERE session_id = ?",
                                (session,)).fetchone() is not None
        report.gists += has_gist
        if report.dry_run:
            continue
        q.drop_gist(conn, session)
        if left == 0:
            conn.execute("DELETE FROM dreamd_sessions WHERE session_id = ?", (session,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
        else:
            q.recount_session(conn, session)
    if whole_user:
        months |= set(q.era_seqs(conn, scope.user))
    if not touched and not whole_user:
        return
    if report.dry_run:
        report.derived = q.tiers_present(conn, scope.user, agent_id, months)
        return
    report.derived = q.drop_tiers(conn, scope.user, agent_id, months)
    q.bump_vector_epoch(conn)
    q.set_state(conn, "forget_pending", "1")


def forget(store: Store, scope: Scope, agent_id: str, *, dry_run: bool = False,
           vacuum: bool = False) -> Report:
    """Erase `scope` (see the module's docstring for the sequence). A dry run reads only."""
    report = Report(scope, dry_run)
    if dry_run:
        with store.read() as conn:
            _erase(conn, scope, agent_id, report)
        return report
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        with store.write() as conn:
            _erase(conn, scope, agent_id, report)
        finish_pending(store)
    finally:
        store.conn.execute("PRAGMA secure_delete = OFF")
    report.wal_truncated = store.checkpoint_truncate()
    if vacuum:
        store.conn.execute("VACUUM")
        report.vacuumed = True
        report.wal_truncated = store.checkpoint_truncate()
    return report


def finish_pending(store: Store) -> bool:
    """Merge the full-text index after a forget, if one is pending. Returns whether it ran."""
    with store.read() as conn:
        if q.get_state(conn, "forget_pending") is None:
            return False
    secure = store.conn.execute("PRAGMA secure_delete").fetchone()[0]
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        with store.write() as conn:
            if q.get_state(conn, "forget_pending") is None:
                return False
            conn.execute("INSERT INTO dreamd_fts (dreamd_fts) VALUES ('optimize')")
            conn.execute("DELETE FROM dreamd_state WHERE key = 'forget_pending'")
    finally:
        store.conn.execute(f"PRAGMA secure_delete = {int(secure)}")
    store.checkpoint_passive()
    return True

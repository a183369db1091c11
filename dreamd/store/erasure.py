"""Erasure and its journal: what a forget deletes, step by step, with `secure_delete` on.

The journal (in `dreamd_state`) holds the scope and a cursor; each step deletes the next
turns with their vectors and full-text rows and moves the cursor in the same short
transaction, so a forget cut short is finished by the next pass or forget
(`finish_pending`). See dreamd.memory.forget for the whole sequence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dreamd.store.corrections import drop_diary, drop_user_word
from dreamd.store.facts import drop_facts_of_turns
from dreamd.store.interface import Conn, Store
from dreamd.store.state import bump_vector_epoch, get_state, iso_utc, set_state
from dreamd.store.tiers import drop_gist, drop_tiers, era_seqs
from dreamd.store.turns import recount_session, session_months, sessions_of
from dreamd.store.vectors import redo_words_of, vector_models, with_neighbours, words_key

STEP = 500  # turns looked at per deleting transaction: ~35-55 us a turn of write lock
__all__ = ["STEP", "finish_pending", "vacuum"]
JOURNAL, JOURNAL_SESSIONS = "forget_pending", "forget_sessions"


@dataclass(frozen=True)
class SessionCut:
    """One session as a forget would leave it."""

    session_id: str
    turns: int  # in scope
    left: int  # not in scope
    has_gist: bool


def _before(cutoff: str | None, created_at: str) -> bool:
    return cutoff is None or iso_utc(created_at) < cutoff


def survey(conn: Conn, user: str, session: str | None, before: str | None
           ) -> tuple[list[SessionCut], set[str]]:
    """Read only: the user's sessions the scope touches, and the months they span."""
    sessions = sorted(sessions_of(conn, [user]))
    if session is not None:
        sessions = [s for s in sessions if s == session]
    cuts: list[SessionCut] = []
    months: set[str] = set()
    for sid in sessions:
        rows = conn.execute("SELECT id, created_at FROM exchanges WHERE session_id = ?",
                            (sid,)).fetchall()
        turns = sum(_before(before, at) for _, at in rows)
        if not turns and before is not None:
            continue
        months |= session_months(conn, sid)
        gist = conn.execute("SELECT 1 FROM summaries WHERE session_id = ?", (sid,)).fetchone()
        cuts.append(SessionCut(sid, turns, len(rows) - turns, gist is not None))
    if session is None and before is None:
        months |= set(era_seqs(conn, user))
    return cuts, months


def open_journal(store: Store, user: str, before: str | None, agent_id: str,
                 sessions: list[str], months: set[str], upto: int,
                 whole: bool = False) -> list[str] | None:
    """Drop what was derived from the sessions and open the journal, in one transaction
    (the user's diary too, which may quote them; forgetting a `whole` user, every word
    they gave on their facts as well). Returns the tiers dropped, or None when another
    journal is open (nothing changed)."""
    job = {"user": user, "before": before, "upto": upto, "next": 0, "after": 0}
    with store.write(alone=True) as conn:
            if get_state(conn, JOURNAL) is not None:
                return None
            for session in sessions:
                drop_gist(conn, session)
            derived = drop_tiers(conn, user, agent_id, months)
            drop_diary(conn, user)
            if whole:
                drop_user_word(conn, user)
            bump_vector_epoch(conn)
            set_state(conn, JOURNAL_SESSIONS, json.dumps(sessions))
            set_state(conn, JOURNAL, json.dumps(job))
    return derived


def pending(conn: Conn) -> dict[str, Any] | None:
    """An unfinished forget, as status shows it: whose, and how many sessions are left."""
    raw = get_state(conn, JOURNAL)
    if raw is None:
        return None
    job: dict[str, Any] = json.loads(raw) if raw != "1" else {"user": None, "next": 0}
    sessions = len(json.loads(get_state(conn, JOURNAL_SESSIONS) or "[]"))
    return {"user": job["user"], "sessions": sessions,
            "sessions_left": max(0, sessions - int(job["next"]))}


def _delete_ids(conn: Conn, ids: list[int], models: list[str]) -> None:
    if not ids:
        return
    gone = set(ids)
    # A turn's indexed words hold its neighbours' (dreamd.text.keys.context_text): the
    # survivors beside an erased turn are taken out of the index and indexed again.
    beside = {i for turn, before, after in with_neighbours(conn, ids)
              for i in (before.id if before else None, after.id if after else None)
              if i is not None and i not in gone}
    redo_words_of(conn, sorted(beside))
    drop_facts_of_turns(conn, ids)
    marks = ",".join("?" * len(ids))
    conn.execute(f"DELETE FROM exchanges WHERE id IN ({marks})", ids)
    for model in models:  # by the full key: an index seek per turn, not a scan
        conn.execute(f"DELETE FROM dreamd_exchange_vectors WHERE model = ? "
                     f"AND exchange_id IN ({marks})", (model, *ids))
    conn.execute(f"DELETE FROM dreamd_fts WHERE {words_key(conn)} IN ({marks})", ids)


def _settle_session(conn: Conn, session: str) -> None:
    """A session whose turns in scope are gone: forgotten entirely, or recounted."""
    if conn.execute("SELECT 1 FROM exchanges WHERE session_id = ? LIMIT 1",
                    (session,)).fetchone() is None:
        conn.execute("DELETE FROM dreamd_sessions WHERE session_id = ?", (session,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
    else:
        recount_session(conn, session)


def _delete_step(conn: Conn, job: dict[str, Any], sessions: list[str],
                 step: int) -> None:
    """Inside a write: delete the next turns in scope, looking at `step` at most; move the
    journal's cursor (session index `next`, last id looked at `after`)."""
    models = vector_models(conn, "dreamd_exchange_vectors")
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


def finish_pending(store: Store, step: int = STEP) -> bool:
    """Carry an open forget journal to its end: delete the rest of its turns, a step per
    transaction, then merge the full-text index. Returns whether there was one."""
    with store.read() as conn:
        if get_state(conn, JOURNAL) is None:
            return False
    while True:
        with store.write(alone=True) as conn:
            raw = get_state(conn, JOURNAL)
            if raw is None:  # another dreamd finished it
                break
            # "1": a journal of the first release, whose turns went in one transaction.
            job = json.loads(raw) if raw != "1" else None
            sessions = json.loads(get_state(conn, JOURNAL_SESSIONS) or "[]")
            if job is not None and job["next"] < len(sessions):
                _delete_step(conn, job, sessions, step)
                set_state(conn, JOURNAL, json.dumps(job))
                continue
            if store.merge_words():
                continue
            conn.execute("DELETE FROM dreamd_state WHERE key IN (?, ?)",
                         (JOURNAL, JOURNAL_SESSIONS))
            break
    # The WAL still holds the forgotten pages' old images: empty it if nobody is using
    # the file right now (the forget command then tries again, waiting its turn).
    store.purge_log(wait=False)
    return True


# The tables a forget deletes from, which PostgreSQL's VACUUM clears of dead rows.
ERASED_TABLES = ("exchanges", "sessions", "summaries", "profile", "eras", "narrative",
                 "facts", "dreamd_fact_sources", "dreamd_sessions", "dreamd_user_sessions",
                 "dreamd_exchange_vectors", "dreamd_vectors", "dreamd_fts", "dreamd_outputs",
                 "dreamd_corrections", "dreamd_diary")


def vacuum(store: Store) -> None:
    """Leave no stale copy of a forgotten row in live storage (see `Store.vacuum`)."""
    store.vacuum(ERASED_TABLES)

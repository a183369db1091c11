"""Sensing: a cheap, index-driven snapshot of how much memory waits to be consolidated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dreamd.config import Config
from dreamd.models import BacklogStats
from dreamd.store import queries as q
from dreamd.store.connect import Store

TALLY_CHUNK = 50_000


def sync_tally(store: Store, chunk: int = TALLY_CHUNK) -> int:
    """Fold exchanges newer than the tally's watermark into dreamd_sessions.

    Reads only the new rows (a rowid range), in chunks, each folded in by its own short
    write that checks the watermark did not move meanwhile. Returns rows folded in.
    """
    folded = 0
    while True:
        with store.read() as conn:
            after = q.tally_watermark(conn)
            newest = q.max_exchange_id(conn)
            if newest <= after:
                return folded
            upto = min(newest, after + chunk)
            groups = q.new_exchange_groups(conn, after, upto)
        with store.write() as conn:
            if q.tally_watermark(conn) != after:
                continue  # another dreamd folded these rows in; read again
            q.apply_tally(conn, groups, upto)
        folded += sum(g[2] for g in groups)


def is_idle(last_at: str, cutoff: datetime) -> bool:
    """The tally keeps times as ISO UTC text (queries.iso_utc), so they compare as text."""
    return last_at <= cutoff.astimezone(UTC).isoformat()


def sync_owners(store: Store, agent_id: str, chunk: int = 500) -> int:
    """Follow the app's word on whose each session is. Where the tally filed a session
    under someone else — its turns came before its sessions row, or the app moved it
    (re-inserted the row or updated `user_id` in place) — the session moves to the
    owner the app names, and what the other user's memory built from it is dropped.
    One indexed comparison of the two tables (~16 ms at 20,000 sessions). Returns
    sessions moved."""
    with store.read() as conn:
        changes = q.owner_changes(conn)
    moved = 0
    for start in range(0, len(changes), chunk):
        with store.write() as conn:
            for session_id, user_id in changes[start : start + chunk]:
                moved += q.rehome_session(conn, session_id, user_id, agent_id)
    return moved


def read_backlog(store: Store, config: Config, now: datetime, embed_model: str) -> BacklogStats:
    """One consistent snapshot (a single read transaction) of every user's backlog.

    Session counts come from the tally's partial index; the tiers are checked per user
    with a gist (a few index seeks each).
    """
    cutoff = now - timedelta(minutes=config.summarize.idle_minutes)
    with store.read() as conn:
        dirty = q.dirty_totals(conn, config.summarize.after, cutoff.astimezone(UTC).isoformat())
        max_id = q.max_exchange_id(conn)
        newer_than_profile = stale = narratives = 0
        for user in q.users_with_gists(conn):
            newer_than_profile += q.gists_past_profile(conn, user)
            stale += len(q.stale_months(conn, user))
            narratives += q.narrative_stale(conn, user)
        marks = q.reflection_marks(conn, config.agent.id)
        return BacklogStats(
            sessions=q.count_sessions(conn),
            dirty=dirty.dirty,
            ripe=dirty.ripe,
            idle_ripe=dirty.idle_ripe,
            unsummarized_turns=dirty.unsummarized,
            idle_ripe_turns=dirty.idle_ripe_turns,
            unembedded_turns=q.count_exchanges_after(conn, q.embed_watermark(conn, embed_model)),
            gists=q.count_gists(conn),
            gists_newer_than_profile=newer_than_profile,
            stale_months=stale,
            narrative_stale=narratives > 0,
            turns_since_reflection=q.count_exchanges_after(conn, marks.exchange_id),
            gists_since_reflection=q.count_gists_after(conn, None, marks.seq),
            last_reflection_at=marks.at,
            max_exchange_id=max_id,
        )

"""Sensing: a cheap, index-driven snapshot of how much memory waits to be consolidated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dreamd.config import Config
from dreamd.ids import narrative_id, profile_id
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


def read_backlog(store: Store, config: Config, now: datetime, embed_model: str) -> BacklogStats:
    """One consistent snapshot (a single read transaction) of the backlog for the user."""
    user = config.user.id
    cutoff = now - timedelta(minutes=config.summarize.idle_minutes)
    with store.read() as conn:
        dirty = q.dirty_totals(conn, user, config.summarize.after,
                              cutoff.astimezone(UTC).isoformat())
        max_id = q.max_exchange_id(conn)
        profile = q.profile_row(conn, profile_id(user))
        narrative = q.narrative_row(conn, narrative_id(user))
        tier_seq = q.max_tier_seq(conn, user, profile_id(user))
        state = q.self_state(conn, config.agent.id)
        marks = (state[0].get("dreamd") if state else None) or {}
        reflected_id = int(marks.get("reflected_exchange_id", 0))
        reflected_seq = int(marks.get("reflected_seq", 0))
        return BacklogStats(
            sessions=q.count_sessions(conn, user),
            dirty=dirty.dirty,
            ripe=dirty.ripe,
            idle_ripe=dirty.idle_ripe,
            unsummarized_turns=dirty.unsummarized,
            idle_ripe_turns=dirty.idle_ripe_turns,
            unembedded_turns=q.count_exchanges_after(conn, q.embed_watermark(conn, embed_model)),
            gists=q.count_gists(conn, user),
            gists_newer_than_profile=q.count_gists_after(conn, user, profile.seq if profile else 0),
            stale_months=len(q.stale_months(conn, user)),
            narrative_stale=tier_seq > 0 and (narrative is None or narrative.seq < tier_seq),
            turns_since_reflection=q.count_exchanges_after(conn, reflected_id),
            gists_since_reflection=q.count_gists_after(conn, user, reflected_seq),
            last_reflection_at=marks.get("reflected_at"),
            max_exchange_id=max_id,
        )

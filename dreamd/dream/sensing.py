"""Sensing: a cheap, index-driven snapshot of how much memory waits to be consolidated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dreamd.config import Config
from dreamd.models import BacklogStats
from dreamd.store import tiers
from dreamd.store import turns as turns_sql
from dreamd.store.interface import Conn, Store
from dreamd.store.pending import count_unembedded, count_unindexed
from dreamd.store.queues import owner_changes, owners_queued, tier_queue, unqueue_owners
from dreamd.store.standing import standing
from dreamd.store.state import iso_utc
from dreamd.store.tiers import (
    ReflectionMarks,
    gists_past_profile,
    reflection_marks,
    rehome_session,
)
from dreamd.store.turns import (
    DirtyTotals,
    TallyRow,
    counts_after,
    new_exchange_groups,
    session_totals,
    tally_rows,
)
from dreamd.store.vectors import embed_watermark, fts_watermark
from dreamd.text.keys import space


def is_idle(last_at: str, cutoff: datetime) -> bool:
    """The tally keeps times as ISO UTC text (state.iso_utc), so they compare as text."""
    return last_at <= cutoff.astimezone(UTC).isoformat()


# The lock of the owner check: one worker at a time takes the queue's entries off.
OWNERS_KEY = "owners"


def sync_owners(store: Store, agent_id: str, chunk: int = 500) -> int:
    """Follow the app's word on whose each session is. Where the tally filed a session
    under someone else — its turns came before its sessions row, or the app moved it
    (re-inserted the row or updated `user_id` in place) — the session moves to the
    owner the app names, and what the other user's memory built from it is dropped.
    Only the sessions rows the app added or moved since the last look are compared (a
    trigger on `sessions` queues them), `chunk` to a short write. Returns sessions moved."""
    if not owners_queued(store):
        return 0  # nothing queued: an idle pass writes nothing
    moved = 0
    while True:
        with store.write() as conn:
            if not store.take(conn, OWNERS_KEY):
                return moved  # another worker is looking at them this moment
            changes, looked = owner_changes(conn, chunk)
            if not changes:
                unqueue_owners(conn, looked)
        if changes:
            # A move drops what another user's memory built, which that user's worker
            # may be writing: it is made while no other dreamd write runs.
            with store.write(alone=True) as conn:
                changes, looked = owner_changes(conn, chunk)
                for session_id, user_id in changes:
                    moved += rehome_session(conn, session_id, user_id, agent_id)
                unqueue_owners(conn, looked)
        if len(looked) < chunk:
            return moved


def with_unfolded(totals: DirtyTotals, tally: dict[str, TallyRow],
                  groups: list[tuple[Any, ...]], ripe_after: int, idle_before: str
                  ) -> tuple[DirtyTotals, int]:
    """The tally's totals as they will be once `groups` (turns it has not counted yet)
    are folded in, and how many of those sessions are new to it. Pure."""
    dirty, unsummarized, ripe, idle_ripe, idle_turns = (
        totals.dirty, totals.unsummarized, totals.ripe, totals.idle_ripe, totals.idle_ripe_turns)
    new_sessions = 0

    def share(turns: int, done: int, done_id: int, last_at: str) -> tuple[int, ...]:
        waiting = turns - done
        is_ripe = done_id == 0 or waiting >= ripe_after
        idle = is_ripe and last_at <= idle_before
        return 1, waiting, int(is_ripe), int(idle), waiting if idle else 0

    for session_id, _user, turns, _first, _last, _first_at, last_at in groups:
        row = tally.get(session_id)
        before: tuple[int, ...] = (0, 0, 0, 0, 0)
        if row is None:
            new_sessions += 1
            row = TallyRow(0, 0, 0, "")
        elif row.turns > row.summarized_turns:  # counted as dirty already
            before = share(row.turns, row.summarized_turns, row.summarized_id, row.last_at)
        after = share(row.turns + turns, row.summarized_turns, row.summarized_id,
                      max(row.last_at, iso_utc(last_at)))
        dirty, unsummarized, ripe, idle_ripe, idle_turns = (
            a + n - b for a, n, b in zip((dirty, unsummarized, ripe, idle_ripe, idle_turns),
                                         after, before, strict=True))
    return DirtyTotals(dirty, unsummarized, ripe, idle_ripe, idle_turns), new_sessions


def tier_backlog(conn: Conn, users: list[str] | None, queued: bool = True
                 ) -> tuple[int, int, int]:
    """Gists newer than their user's profile, stale eras, stale narratives: of the queued
    users (of `users`) only, whose tiers may be behind (the rest are current); none
    when the caller has seen the queue empty (`queued`)."""
    newer_than_profile = stale = narratives = 0
    for user in tier_queue(conn, users) if queued else []:
        newer_than_profile += gists_past_profile(conn, user)
        stale += len(tiers.stale_months(conn, user))
        narratives += tiers.narrative_stale(conn, user)
    return newer_than_profile, stale, narratives


def since_reflection(conn: Conn, config: Config, done: tuple[int, int] | None = None,
                     marks: ReflectionMarks | None = None) -> dict[str, Any]:
    """What the agent has not reflected on yet, over every user (reflect is the agent's),
    and with the embed and words-index watermarks (`done`), how many turns wait past
    each: one round trip for all."""
    marks = marks or reflection_marks(conn, config.agent.id)
    turns, gists = counts_after(conn, [marks.exchange_id, *(done or ())], marks.seq)
    found = {"turns_since_reflection": turns[0], "gists_since_reflection": gists,
             "last_reflection_at": marks.at}
    if done is None:
        return found
    return {**found, "unembedded_turns": turns[1], "unindexed_turns": turns[2]}


def read_backlog(store: Store, config: Config, now: datetime, embed_model: str,
                 upto: int | None = None, users: list[str] | None = None) -> BacklogStats:
    """One consistent snapshot (a single read transaction) of every user's backlog (or
    of `users`': a worker's leased users).

    Session counts come from the tally's partial index, plus the turns (up to `upto`)
    no pass has counted yet, so a read-only look between passes tells the truth; the
    tiers are checked per user with a gist (a few index seeks each).
    """
    if users is not None:
        return scoped_backlog(store, config, now, embed_model, upto, users)
    cutoff = now - timedelta(minutes=config.summarize.idle_minutes)
    idle_before = cutoff.astimezone(UTC).isoformat()
    with store.read() as conn:
        totals = session_totals(conn, config.summarize.after, idle_before)
        dirty = totals.dirty
        now_at = standing(conn, space(embed_model), config.agent.id)
        marks, reflected = now_at.marks, now_at.reflected
        max_id, counted = marks.newest, marks.tallied
        new_sessions = 0
        limit = max_id if upto is None else min(max_id, upto)
        if limit > counted:
            groups = new_exchange_groups(conn, counted, limit)
            tally = tally_rows(conn, [g[0] for g in groups])
            dirty, new_sessions = with_unfolded(dirty, tally, groups, config.summarize.after,
                                                idle_before)
        newer_than_profile, stale, narratives = tier_backlog(conn, None, now_at.tiers_queued)
        return BacklogStats(
            sessions=totals.sessions + new_sessions,
            dirty=dirty.dirty,
            ripe=dirty.ripe,
            idle_ripe=dirty.idle_ripe,
            unsummarized_turns=dirty.unsummarized,
            idle_ripe_turns=dirty.idle_ripe_turns,
            turns_without_facts=totals.unread + max(0, limit - counted),
            gists_newer_than_profile=newer_than_profile,
            stale_months=stale,
            narrative_stale=narratives > 0,
            **since_reflection(conn, config, (marks.embedded, marks.indexed), reflected),
            max_exchange_id=max_id,
        )


def scoped_backlog(store: Store, config: Config, now: datetime, embed_model: str,
                   upto: int | None, users: list[str]) -> BacklogStats:
    """The backlog of some users, after the pass has folded every turn to `upto` into
    the tally (a worker's pass does that before it claims users)."""
    cutoff = now - timedelta(minutes=config.summarize.idle_minutes)
    idle_before = cutoff.astimezone(UTC).isoformat()
    model = space(embed_model)
    with store.read() as conn:
        max_id = turns_sql.max_exchange_id(conn)
        limit = max_id if upto is None else min(max_id, upto)
        totals = session_totals(conn, config.summarize.after, idle_before, users)
        dirty = totals.dirty
        newer_than_profile, stale, narratives = tier_backlog(conn, users)
        return BacklogStats(
            sessions=totals.sessions,
            dirty=dirty.dirty,
            ripe=dirty.ripe,
            idle_ripe=dirty.idle_ripe,
            unsummarized_turns=dirty.unsummarized,
            idle_ripe_turns=dirty.idle_ripe_turns,
            unembedded_turns=count_unembedded(conn, model, embed_watermark(conn, model),
                                                limit, users),
            unindexed_turns=count_unindexed(conn, fts_watermark(conn), limit, users),
            turns_without_facts=totals.unread,
            gists_newer_than_profile=newer_than_profile,
            stale_months=stale,
            narrative_stale=narratives > 0,
            **since_reflection(conn, config),
            max_exchange_id=max_id,
        )

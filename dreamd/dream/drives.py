"""The four drives: a pure function from what sensing saw to levels and due jobs.

No SQL, no clock, no logging: `now` and the previous levels are passed in, so the
whole decision is a table a test can read.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from dreamd.config import Config
from dreamd.models import BacklogStats, Decision, Drives, JobDecision, JobSpec


def saturate(x: float, half: float) -> float:
    """0 at 0, 0.5 at `half`, towards 1 beyond: pressure that builds but never overflows."""
    if x <= 0:
        return 0.0
    return x / (x + half)


def hours_between(earlier: str | None, now: datetime) -> float | None:
    if not earlier:
        return None
    try:
        then = datetime.fromisoformat(earlier)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=now.tzinfo)
    return max(0.0, (now - then).total_seconds() / 3600)


def continuity(stats: BacklogStats, config: Config) -> float:
    return max(
        saturate(stats.idle_ripe_turns, config.summarize.after),
        saturate(stats.idle_ripe, 1),
        saturate(stats.unembedded_turns, config.embed.batch_size),
        saturate(stats.unindexed_turns, config.embed.batch_size),
        saturate(stats.turns_without_facts, config.embed.batch_size),
    )


def coherence(stats: BacklogStats) -> float:
    return max(
        saturate(stats.gists_newer_than_profile, 3),
        saturate(stats.stale_months, 1),
        0.5 if stats.narrative_stale else 0.0,
    )


def curiosity(stats: BacklogStats, config: Config, now: datetime) -> float:
    """Novelty since the last reflection; elapsed time only amplifies real novelty."""
    if stats.turns_since_reflection == 0 and stats.gists_since_reflection == 0:
        return 0.0
    hours = hours_between(stats.last_reflection_at, now)
    calm = (
        (1 - saturate(stats.turns_since_reflection, config.reflect.turns_scale))
        * (1 - saturate(stats.gists_since_reflection, 2))
        * (1 - saturate(hours if hours is not None else config.reflect.hours_scale,
                        config.reflect.hours_scale))
    )
    return 1 - calm


def stability(stats: BacklogStats, config: Config) -> float:
    """How caught up memory is: 1 when nothing at all is pending."""
    return (
        (1 - saturate(stats.unsummarized_turns, config.summarize.after))
        * (1 - saturate(stats.unembedded_turns, config.embed.batch_size))
        * (1 - saturate(stats.unindexed_turns, config.embed.batch_size))
        * (1 - coherence(stats))
    )


def levels(stats: BacklogStats, config: Config, now: datetime) -> Drives:
    return Drives(
        continuity=continuity(stats, config),
        coherence=coherence(stats),
        curiosity=curiosity(stats, config, now),
        stability=stability(stats, config),
    )


def decide_job(
    job: JobSpec,
    stats: BacklogStats,
    previous: Drives,
    config: Config,
    now: datetime,
    *,
    force: bool = False,
) -> JobDecision:
    """Whether one job runs now: it has work, and its drive passed its threshold (or force)."""
    has_work, what = job.work(stats, force, config)
    if not has_work:
        return JobDecision(job.name, False, f"nothing to do: {what}")
    if force:
        return JobDecision(job.name, True, f"forced: {what}")
    level = getattr(levels(stats, config, now), job.drive)
    threshold = getattr(config.drives, f"{job.drive}_threshold")
    before = getattr(previous, job.drive)
    trend = f"{job.drive} {before:.2f}→{level:.2f}"
    if level >= threshold:
        return JobDecision(job.name, True, f"{trend} ≥ {threshold:.2f}: {what}")
    return JobDecision(job.name, False, f"{trend} < {threshold:.2f}: {what}")


def decide(
    stats: BacklogStats,
    previous: Drives,
    config: Config,
    now: datetime,
    jobs: Iterable[JobSpec],
    *,
    force: bool = False,
) -> Decision:
    """Drive levels and a decision for every job, from one snapshot."""
    return Decision(
        drives=levels(stats, config, now),
        jobs=tuple(decide_job(job, stats, previous, config, now, force=force) for job in jobs),
    )

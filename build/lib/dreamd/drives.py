"""The four drives: a pure function from what sensing saw to levels and due jobs.

No SQL, no clock, no logging: `now` and the previous levels are passed in, so the
whole decision is a table a test can read.
"""

from __future__ import annotations

from datetime import datetime

from dreamd.config import Config
from dreamd.models import JOB_ORDER, BacklogStats, Decision, Drives, JobDecision


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
        * (1 - coherence(stats))
    )


def levels(stats: BacklogStats, config: Config, now: datetime) -> Drives:
    return Drives(
        continuity=continuity(stats, config),
        coherence=coherence(stats),
        curiosity=curiosity(stats, config, now),
        stability=stability(stats, config),
    )


def _work(job: str, stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    """Whether `job` has anything to do, and what, in words."""
    if job == "embed":
        return stats.unembedded_turns > 0, f"{stats.unembedded_turns} turns without a vector"
    if job == "summarize":
        if force:
            return stats.dirty > 0, f"{stats.dirty} sessions with unsummarized turns"
        if stats.idle_ripe:
            return True, f"{stats.idle_ripe} idle ripe sessions ({stats.idle_ripe_turns} turns)"
        waiting = stats.ripe - stats.idle_ripe
        if waiting:
            return False, (
                f"{waiting} ripe sessions still active "
                f"(idle_minutes={config.summarize.idle_minutes:g})"
            )
        if stats.dirty:
            return False, (
                f"{stats.dirty} sessions have fewer than {config.summarize.after} new turns"
            )
        return False, "every session's gist is current"
    if job == "profile":
        return stats.gists_newer_than_profile > 0, (
            f"{stats.gists_newer_than_profile} gists newer than the profile"
        )
    if job == "eras":
        return stats.stale_months > 0, f"{stats.stale_months} months with a stale era"
    if job == "narrative":
        return stats.narrative_stale, "profile or eras changed since the narrative"
    if job == "reflect":
        return (stats.turns_since_reflection > 0 or stats.gists_since_reflection > 0), (
            f"{stats.turns_since_reflection} turns and {stats.gists_since_reflection} gists "
            "since the last reflection"
        )
    raise ValueError(f"unknown job {job!r}")


_DRIVE_OF = {
    "embed": "continuity",
    "summarize": "continuity",
    "profile": "coherence",
    "eras": "coherence",
    "narrative": "coherence",
    "reflect": "curiosity",
}


def decide_job(
    job: str,
    stats: BacklogStats,
    previous: Drives,
    config: Config,
    now: datetime,
    *,
    force: bool = False,
) -> JobDecision:
    """Whether one job runs now: it has work, and its drive passed its threshold (or force)."""
    has_work, what = _work(job, stats, force, config)
    if not has_work:
        return JobDecision(job, False, f"nothing to do: {what}")
    if force:
        return JobDecision(job, True, f"forced: {what}")
    drive = _DRIVE_OF[job]
    level = getattr(levels(stats, config, now), drive)
    threshold = getattr(config.drives, f"{drive}_threshold")
    before = getattr(previous, drive)
    trend = f"{drive} {before:.2f}→{level:.2f}"
    if level >= threshold:
        return JobDecision(job, True, f"{trend} ≥ {threshold:.2f}: {what}")
    return JobDecision(job, False, f"{trend} < {threshold:.2f}: {what}")


def decide(
    stats: BacklogStats,
    previous: Drives,
    config: Config,
    now: datetime,
    *,
    force: bool = False,
) -> Decision:
    """Drive levels and a decision for every job, from one snapshot."""
    return Decision(
        drives=levels(stats, config, now),
        jobs=tuple(
            decide_job(job, stats, previous, config, now, force=force) for job in JOB_ORDER
        ),
    )

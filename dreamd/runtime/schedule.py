"""When to wake next: pure functions of stability, the bounds and the time of day."""

from __future__ import annotations

from datetime import datetime

from dreamd.config import ScheduleConfig, parse_quiet_hours


def next_delay(stability: float, schedule: ScheduleConfig) -> float:
    """Seconds until the next pass: the minimum when nothing is caught up, the maximum
    when everything is; in between, in proportion to stability."""
    lo, hi = schedule.min_interval_seconds, schedule.max_interval_seconds
    return lo + (hi - lo) * min(1.0, max(0.0, stability))


def retry_delay(tries: int, stability: float, schedule: ScheduleConfig) -> float:
    """Seconds until the next pass after `tries` passes in a row the store cut short (its
    server away): `store_retry_seconds`, doubling with each, up to
    `store_retry_max_seconds`, and never later than the schedule would wake."""
    backoff = schedule.store_retry_seconds * 2 ** max(0, tries - 1)
    return float(min(backoff, schedule.store_retry_max_seconds, next_delay(stability, schedule)))


def in_quiet_hours(now: datetime, spec: str) -> bool:
    """Whether the local time `now` falls in the window (which may wrap past midnight)."""
    window = parse_quiet_hours(spec)
    if window is None:
        return False
    start, end = window
    minute = now.hour * 60 + now.minute
    if start <= end:
        return start <= minute < end
    return minute >= start or minute < end

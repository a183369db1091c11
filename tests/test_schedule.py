"""When to wake: a pure table of stability, bounds and quiet hours."""

from __future__ import annotations

from datetime import datetime

import pytest

from dreamd.config import ScheduleConfig
from dreamd.runtime.schedule import in_quiet_hours, next_delay, retry_delay

BOUNDS = ScheduleConfig(min_interval_seconds=60, max_interval_seconds=1860)


@pytest.mark.parametrize(("stability", "delay"),
                         [(0.0, 60), (0.5, 960), (1.0, 1860), (1.7, 1860), (-1, 60)])
def test_behind_wakes_sooner_caught_up_later(stability: float, delay: float) -> None:
    assert next_delay(stability, BOUNDS) == delay


@pytest.mark.parametrize(("tries", "stability", "schedule", "delay"), [
    (1, 0.0, BOUNDS, 1.0),
    (2, 0.0, BOUNDS, 2.0),
    (5, 0.0, BOUNDS, 16.0),
    (6, 0.0, BOUNDS, 30.0),  # the most it grows to
    (40, 1.0, BOUNDS, 30.0),
    (6, 0.0, ScheduleConfig(min_interval_seconds=5), 5.0),  # never later than the schedule
    (3, 0.0, ScheduleConfig(store_retry_seconds=0.5, store_retry_max_seconds=60,
                            min_interval_seconds=60), 2.0),
])
def test_a_store_away_is_tried_again_in_seconds_growing(
        tries: int, stability: float, schedule: ScheduleConfig, delay: float) -> None:
    assert retry_delay(tries, stability, schedule) == delay


@pytest.mark.parametrize(
    ("spec", "hour", "minute", "quiet"),
    [("", 3, 0, False), ("01:00-05:00", 3, 0, True), ("01:00-05:00", 5, 0, False),
     ("23:00-07:00", 23, 30, True), ("23:00-07:00", 6, 59, True), ("23:00-07:00", 12, 0, False),
     ("08:00-18:00", 7, 59, False), ("08:00-18:00", 8, 0, True)],
)
def test_quiet_hours(spec: str, hour: int, minute: int, quiet: bool) -> None:
    assert in_quiet_hours(datetime(2026, 5, 1, hour, minute), spec) is quiet

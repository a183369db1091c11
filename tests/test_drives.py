"""The drives are a pure table: stats + previous + config + now -> levels and due jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dreamd.config import Config
from dreamd.dream.drives import decide, levels, saturate
from dreamd.dream.jobs.registry import JOBS
from dreamd.models import BacklogStats, Drives

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CFG = Config()


def due(stats: BacklogStats, force: bool = False) -> set[str]:
    decision = decide(stats, Drives(), CFG, NOW, JOBS, force=force)
    return {j.job for j in decision.jobs if j.due}


@pytest.mark.parametrize(
    ("stats", "force", "expected"),
    [
        (BacklogStats(), False, set()),
        (BacklogStats(), True, set()),
        # One quiet session never summarized: continuity 0.5 ≥ 0.3.
        (BacklogStats(dirty=1, ripe=1, idle_ripe=1, idle_ripe_turns=5, unsummarized_turns=5),
         False, {"summarize"}),
        # Ripe but the chat is still active: wait (idle gating) ...
        (BacklogStats(dirty=1, ripe=1, idle_ripe=0, unsummarized_turns=30), False, set()),
        # ... unless forced.
        (BacklogStats(dirty=1, ripe=1, idle_ripe=0, unsummarized_turns=30), True, {"summarize"}),
        # A few unembedded turns do not wake embedding alone; a batch's worth does.
        (BacklogStats(unembedded_turns=5), False, set()),
        (BacklogStats(unembedded_turns=64), False, {"embed"}),
        (BacklogStats(unembedded_turns=5), True, {"embed"}),
        # Turns with vectors and no words (a pass cut between the two): the same.
        (BacklogStats(unindexed_turns=5), False, set()),
        (BacklogStats(unindexed_turns=64), False, {"embed"}),
        (BacklogStats(unindexed_turns=5), True, {"embed"}),
        # New gists: profile and eras both follow (coherence 0.5 from a stale month).
        (BacklogStats(gists_newer_than_profile=1, stale_months=1), False,
         {"profile", "eras"}),
        (BacklogStats(narrative_stale=True), False, {"narrative"}),
        # Curiosity needs real novelty; 10 turns in a fresh file is not enough ...
        (BacklogStats(turns_since_reflection=10, last_reflection_at=NOW.isoformat()), False,
         set()),
        # ... 100 turns and a new gist is.
        (BacklogStats(turns_since_reflection=100, gists_since_reflection=1,
                      last_reflection_at=NOW.isoformat()), False, {"reflect"}),
        # Time alone amplifies novelty: 10 turns after two days of silence.
        (BacklogStats(turns_since_reflection=10,
                      last_reflection_at=(NOW - timedelta(hours=48)).isoformat()), False,
         {"reflect"}),
    ],
)
def test_due_jobs(stats: BacklogStats, force: bool, expected: set[str]) -> None:
    assert due(stats, force) == expected


@pytest.mark.parametrize(
    ("stats", "drive", "low", "high"),
    [
        (BacklogStats(), "stability", 1.0, 1.0),
        (BacklogStats(unsummarized_turns=20), "stability", 0.49, 0.51),
        (BacklogStats(idle_ripe=3, idle_ripe_turns=60), "continuity", 0.74, 0.76),
        (BacklogStats(turns_since_reflection=0, gists_since_reflection=0), "curiosity", 0, 0),
        (BacklogStats(stale_months=3), "coherence", 0.74, 0.76),
    ],
)
def test_levels(stats: BacklogStats, drive: str, low: float, high: float) -> None:
    assert low <= getattr(levels(stats, CFG, NOW), drive) <= high


def test_reasons_name_the_drive_the_threshold_and_the_work() -> None:
    stats = BacklogStats(dirty=2, ripe=2, idle_ripe=0, unsummarized_turns=50)
    reason = decide(stats, Drives(continuity=0.2), CFG, NOW, JOBS).job("summarize").reason
    assert "2 ripe sessions still active" in reason
    stats = BacklogStats(dirty=1, ripe=1, idle_ripe=1, idle_ripe_turns=40)
    reason = decide(stats, Drives(continuity=0.1), CFG, NOW, JOBS).job("summarize").reason
    assert reason.startswith("continuity 0.10→") and "≥ 0.30" in reason


def test_threshold_comes_from_config() -> None:
    import dataclasses

    strict = dataclasses.replace(CFG, drives=dataclasses.replace(CFG.drives,
                                                                 continuity_threshold=0.9))
    stats = BacklogStats(dirty=1, ripe=1, idle_ripe=1, idle_ripe_turns=5)
    assert decide(stats, Drives(), strict, NOW, JOBS).job("summarize").due is False


@pytest.mark.parametrize(("x", "half", "expected"), [(0, 1, 0.0), (1, 1, 0.5), (3, 1, 0.75),
                                                    (-5, 1, 0.0)])
def test_saturate(x: float, half: float, expected: float) -> None:
    assert saturate(x, half) == expected

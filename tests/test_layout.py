"""The package's shape: SQL only in the store, nothing above it tied to SQLite, modules
of a readable size, and a job added by one module and one registration."""

from __future__ import annotations

import re
from pathlib import Path

from dreamd.config import Config, DrivesConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.registry import JOBS
from dreamd.models import BacklogStats, JobResult, JobSpec
from tests.helpers import (
    ROOT,
    RecordingCompleter,
    add_turns,
    chat_texts,
    config_for,
    make_chat_file,
    open_sqlite,
)

PACKAGE = ROOT / "dreamd"
ABOVE_STORE = [p for p in PACKAGE.rglob("*.py") if "store" not in p.relative_to(PACKAGE).parts]
# What only an SQLite engine would say: its module, statements, its full-text syntax.
ENGINE_WORDS = re.compile(r"\bimport sqlite3\b|sqlite3\.|\.execute(many)?\(|\bMATCH\b|"
                          r"\bbm25\b|\browid\b|PRAGMA")


def test_nothing_above_the_store_knows_the_engine() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in ABOVE_STORE
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if ENGINE_WORDS.search(line)]
    assert offenders == []
    assert len(ABOVE_STORE) > 30  # the walk found the package


def test_modules_are_readable_sizes() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert max(sizes.values()) <= 500, max(sizes.items(), key=lambda kv: kv[1])
    top = [p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed")]
    assert len(top) <= 16, sorted(top)


def ran_tidy(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return stats.unsummarized_turns > 0, f"{stats.unsummarized_turns} turns to tidy"


def test_a_job_is_one_module_and_one_registration(db: Path) -> None:
    """A new job declares its drive and its work; the pass schedules it by that drive."""
    seen: list[str] = []

    def run(ctx: JobContext, reason: str) -> JobResult:
        seen.append(reason)
        return JobResult("tidy", True, reason, done=1)

    tidy = JobSpec(name="tidy", drive="continuity", work=ran_tidy, run=run)
    jobs = JOBS.with_job(tidy, after="embed")
    assert jobs.names[:3] == ("embed", "tidy", "summarize")
    conn = make_chat_file(db)
    add_turns(conn, "s1", chat_texts(0, 10))
    conn.close()

    # A quiet session of 10 turns is continuity 0.5: under a threshold of 0.9 the job
    # waits (and so does everything else on that drive) ...
    calm = config_for(db, drives=DrivesConfig(continuity_threshold=0.9))
    store = open_sqlite(calm)
    result = run_pass(store, calm, RecordingCompleter(store).embedder, RecordingCompleter(store),
                      trigger="test", jobs=jobs)
    assert seen == [] and result.drives_before.continuity == 0.5
    assert "tidy" not in [j.job for j in result.jobs if j.ran]
    # ... and under 0.1 its drive wakes it, with the reason the drive gave.
    eager = config_for(db, drives=DrivesConfig(continuity_threshold=0.1))
    result = run_pass(store, eager, RecordingCompleter(store).embedder,
                      RecordingCompleter(store), trigger="test", jobs=jobs)
    store.close()
    assert len(seen) == 1 and seen[0].startswith("continuity")
    assert "10 turns to tidy" in seen[0]
    assert [j.job for j in result.jobs if j.ran][:2] == ["embed", "tidy"]

"""What every job shares: its context, the pass budget, and failure bookkeeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dreamd.backends.protocols import Completer, Embedder
from dreamd.config import Config
from dreamd.models import Completion, JobResult, Prompt
from dreamd.store import queries as q
from dreamd.store.connect import Store


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Budget:
    """The per-pass budget: wall time and items, plus the stop flag a signal may set."""

    max_seconds: float = 0.0
    max_items: int = 0
    stop: Callable[[], bool] = lambda: False
    started: float = field(default_factory=time.monotonic)
    items: int = 0

    def exhausted(self) -> bool:
        if self.stop():
            return True
        if self.max_items and self.items >= self.max_items:
            return True
        return bool(self.max_seconds) and time.monotonic() - self.started >= self.max_seconds

    def spend(self, n: int = 1) -> None:
        self.items += n


@dataclass
class JobContext:
    store: Store
    config: Config
    embedder: Embedder
    completer: Completer
    budget: Budget
    force: bool = False
    clock: Callable[[], datetime] = utcnow
    log: Any = None
    progress: Callable[[str, int, int], None] = lambda job, done, total: None

    def now(self) -> datetime:
        return self.clock()

    def now_text(self) -> str:
        return self.clock().isoformat()

    @property
    def names(self) -> dict[str, str]:
        return {"user": self.config.user.name, "agent": self.config.agent.name}

    @property
    def source(self) -> str:
        """How derived rows are marked: which kind of backend and model made them."""
        kind = "extractive" if self.completer.name == "extractive" else "llm"
        return f"{kind}:{getattr(self.completer, 'model', self.completer.name)}"

    def complete(self, prompt: Prompt) -> Completion:
        """Call the Completer; never with a transaction open on the memory file."""
        if self.store.in_transaction:
            raise RuntimeError("internal: backend call inside a transaction")
        return self.completer.complete(prompt)


def failed_items(ctx: JobContext, job: str) -> dict[str, str | None]:
    """Items of `job` that failed before: item -> why not to try it now (None: try it).

    Quarantined items wait for a person; backing-off items wait for their time, except
    under --force, which retries them at once.
    """
    with ctx.store.read() as conn:
        rows = q.failures(conn, job)
    now = ctx.now_text()
    out: dict[str, str | None] = {}
    for f in rows:
        if f.quarantined:
            out[f.item] = "quarantined"
        elif not ctx.force and f.next_attempt_at > now:
            out[f.item] = f"backing off until {f.next_attempt_at}"
        else:
            out[f.item] = None
    return out


def backoff_seconds(config: Config, attempts: int) -> float:
    return min(config.jobs.backoff_max_seconds, config.jobs.backoff_seconds * 2 ** (attempts - 1))


def note_failure(ctx: JobContext, job: str, item: str, error: BaseException) -> str:
    """Record a failed item in one short write; quarantine it after max_attempts."""
    message = f"{type(error).__name__}: {error}"
    with ctx.store.write() as conn:
        previous = conn.execute(
            "SELECT attempts FROM dreamd_failures WHERE job = ? AND item = ?", (job, item)
        ).fetchone()
        attempts = (int(previous[0]) if previous else 0) + 1
        quarantine = attempts >= ctx.config.jobs.max_attempts
        next_at = ctx.now() + timedelta(seconds=backoff_seconds(ctx.config, attempts))
        q.record_failure(conn, job, item, message, ctx.now_text(), next_at.isoformat(), quarantine)
    if ctx.log is not None:
        ctx.log.warning(
            "job_item_failed", job=job, item=item, attempts=attempts,
            quarantined=quarantine, error=message[:200],
        )
    return f"{item}: {message[:200]}"


def run_single(
    ctx: JobContext, job: str, item: str, reason: str, attempt: Callable[[], bool]
) -> JobResult:
    """Run a one-item job (profile, narrative, reflect) with the failure bookkeeping."""
    failures = failed_items(ctx, job)
    if failures.get(item):
        return JobResult(job, True, reason, skipped=1, errors=(f"{item}: {failures[item]}",))
    try:
        stored = attempt()
    except Exception as exc:  # recorded, shown in status; the rest of the pass goes on
        return JobResult(job, True, reason, failed=1, errors=(note_failure(ctx, job, item, exc),))
    note_success(ctx, job, item, failures)
    if stored:
        ctx.budget.spend()
    return JobResult(job, True, reason, done=int(stored), skipped=int(not stored))


def note_success(ctx: JobContext, job: str, item: str, failed: dict[str, str | None]) -> None:
    if item in failed:
        with ctx.store.write() as conn:
            q.clear_failure(conn, job, item)

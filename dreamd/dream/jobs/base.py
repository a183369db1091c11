"""What every job is handed (its context: the pass's dependencies, state, policy for
asking a model, and threads), and failure bookkeeping."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dreamd.backends import write_gate
from dreamd.backends.llm_output import bounded, estimate_tokens
from dreamd.backends.protocols import Completer, Embedder
from dreamd.config import Config
from dreamd.dream.jobs.asking import Again, Asking, Check
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.state import PassState
from dreamd.errors import PASS_STOPPING, BudgetExhausted, InputRejected, Stopping
from dreamd.logger import Logger, silent
from dreamd.models import Completion, JobSpec, Prompt
from dreamd.store import runs
from dreamd.store.failure import store_away
from dreamd.store.interface import Store
from dreamd.store.runs import clear_failure, failure_attempts, record_failure


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class PassDeps:
    """What a pass is given: the store (a job beside the others has a connection of its
    own), the configuration, the two models, and how it tells time, logs and progress."""

    store: Store
    config: Config
    embedder: Embedder
    completer: Completer
    force: bool = False  # --force: every job now, backing-off items retried
    clock: Callable[[], datetime] = utcnow
    log: Logger = field(default_factory=silent)
    progress: Callable[[str, int, int], None] = lambda job, done, total: None


@dataclass
class Threads:
    """The pass's thread plumbing, shared by jobs side by side (see dreamd.dream.lanes)."""

    # Writes wait for the pass's LLM threads to stop computing (see write_gate): one gate
    # for every job of the pass, so that none computes while another job writes.
    gate: write_gate.Gate = field(default_factory=write_gate.Gate)
    # Jobs side by side share `completer.workers` calls at once (None: one job at a
    # time, its thread pool is the limit).
    calls: threading.Semaphore | None = None
    # Second connections opened for jobs side by side: kept for the pass's later rounds
    # and a worker's later batches, closed when the pass ends.
    spare: list[Store] = field(default_factory=list)


@dataclass
class JobContext:
    """What a job is handed: the pass's dependencies, its state, the policy for asking a
    model, its threads, and this job's thread. Jobs side by side each have one, sharing
    all but the store's connection, `owner` and `reached`."""

    deps: PassDeps
    state: PassState
    asking: Asking
    threads: Threads = field(default_factory=Threads)
    # The thread that uses this context's connection: a backend call made on it inside a
    # transaction is a bug (see complete).
    owner: int = field(default_factory=threading.get_ident)
    # A job calls it once it has done what the jobs that need it read, and goes on with
    # work only it reads: side by side (dreamd.dream.lanes), they may start now. One job
    # after another, nothing.
    reached: Callable[[], None] = lambda: None

    @classmethod
    def for_pass(cls, store: Store, config: Config, embedder: Embedder, completer: Completer,
                 budget: Budget, *, force: bool = False, clock: Callable[[], datetime] = utcnow,
                 log: Logger | None = None,
                 progress: Callable[[str, int, int], None] = lambda job, done, total: None,
                 tasks: Mapping[str, JobSpec] | None = None, run_id: int | None = None,
                 epoch: str | None = None) -> JobContext:
        """The context of a pass (or of a job run alone, as tests and benches do)."""
        log = log or silent()
        return cls(PassDeps(store, config, embedder, completer, force, clock, log, progress),
                   PassState(budget, run_id=run_id, epoch=epoch),
                   Asking(completer, embedder, config, log, tasks or {}))

    # The dependencies every job reads, by their short names.
    @property
    def store(self) -> Store:
        return self.deps.store

    @property
    def config(self) -> Config:
        return self.deps.config

    @property
    def embedder(self) -> Embedder:
        return self.deps.embedder

    @property
    def log(self) -> Logger:
        return self.deps.log

    def now(self) -> datetime:
        return self.deps.clock()

    def now_text(self) -> str:
        return self.deps.clock().isoformat()

    def names_for(self, user_id: str) -> dict[str, str]:
        """Names for prompts: the configured user's name, any other user by their id."""
        user = self.config.user.name if user_id == self.config.user.id else user_id
        return {"user": user, "agent": self.config.agent.name}

    def complete(self, prompt: Prompt, check: Check | None = None,
                 again: Again | None = None) -> Completion:
        """Ask the model (see Asking.complete): never inside a transaction, within the
        token budget, in one of the pass's call slots."""
        if threading.get_ident() == self.owner and self.store.in_transaction:
            raise RuntimeError("internal: backend call inside a transaction")
        return self.asking.complete(prompt, self._call, check, again)

    @contextlib.contextmanager
    def call_slot(self) -> Iterator[None]:
        """One of the calls the pass may have out at once, waited for (holding no share
        of the write gate) while jobs side by side use them all."""
        calls, state = self.threads.calls, self.state
        if calls is None:
            yield
            return
        with write_gate.waiting():
            calls.acquire()
        try:
            # While it waited: no call is made.
            if state.halted is not None:
                raise type(state.halted)(str(state.halted))
            if state.budget.stop() or state.ends.failed is not None:
                raise Stopping("dreamd is stopping: no new calls")
            yield
        finally:
            calls.release()

    def _reserve(self, prompt: Prompt) -> int:
        if not self.asking.llm:
            return 0
        estimate = estimate_tokens(prompt.system + prompt.user)
        estimate += self.config.completer.max_output_tokens
        limits, tokens, state = self.config.budget, self.state.tokens, self.state
        with tokens.lock:
            if state.halted is not None:
                raise type(state.halted)(str(state.halted))
            pending = tokens.used + tokens.reserved + estimate
            if limits.tokens_per_pass and pending > limits.tokens_per_pass:
                raise BudgetExhausted(
                    f"the next call (~{estimate} tokens) would pass budget.tokens_per_pass "
                    f"({limits.tokens_per_pass}; {tokens.used} used this pass)")
            if limits.tokens_per_day and tokens.before_today + pending > limits.tokens_per_day:
                raise BudgetExhausted(
                    f"the next call (~{estimate} tokens) would pass budget.tokens_per_day "
                    f"({limits.tokens_per_day}; {tokens.before_today + tokens.used} "
                    "used today)")
            tokens.reserved += estimate
        return estimate

    def _call(self, prompt: Prompt) -> Completion:
        tokens = self.state.tokens
        estimate = self._reserve(prompt)
        try:
            with self.call_slot():
                completion = self.deps.completer.complete(prompt)
        except PASS_STOPPING as exc:
            self.state.halt(exc, self.log)  # at once: a call queued behind it is never made
            raise
        finally:
            with tokens.lock:
                tokens.reserved -= estimate
        with tokens.lock:
            tokens.used_in += completion.tokens_in
            tokens.used_out += completion.tokens_out
        # Every backend's answer is bounded here, before any job sees it.
        return dataclasses.replace(completion, text=bounded(completion.text, prompt.max_chars,
                                                            prompt.task))


def input_hash(prompt: Prompt) -> str:
    return hashlib.sha256(f"{prompt.task}\0{prompt.system}\0{prompt.user}".encode()).hexdigest()


def complete_once(ctx: JobContext, prompt: Prompt, cached: tuple[str, str] | None,
                  check: Check | None = None, again: Again | None = None) -> tuple[Completion, str]:
    """The answer for a prompt, reusing the stored one when the inputs are unchanged:
    an unchanged input costs no tokens. Returns the completion and the input hash."""
    digest = input_hash(prompt)
    if cached is not None and cached[0] == digest:
        return Completion(cached[1], "cache", "cache", extractive=not ctx.asking.llm), digest
    return ctx.complete(prompt, check, again), digest


def failed_items(ctx: JobContext, job: str) -> dict[str, str | None]:
    """Items of `job` that failed before: item -> why not to try it now (None: try it).

    Quarantined items wait for a person; backing-off items wait for their time, except
    under --force, which retries them at once (but not in the pass they failed in).
    """
    with ctx.store.read() as conn:
        rows = runs.failures(conn, job)
    now = ctx.now_text()
    out: dict[str, str | None] = {}
    for f in rows:
        if f.quarantined:
            out[f.item] = "quarantined"
        elif (job, f.item) in ctx.state.failed_now:  # the same prompt would fail the same way
            out[f.item] = "failed earlier in this pass"
        elif not ctx.deps.force and f.next_attempt_at > now:
            out[f.item] = f"backing off until {f.next_attempt_at}"
        else:
            out[f.item] = None
    return out


def backoff_seconds(config: Config, attempts: int) -> float:
    doubled = config.jobs.backoff_seconds * 2 ** (attempts - 1)
    return float(min(config.jobs.backoff_max_seconds, doubled))


def note_failure(ctx: JobContext, job: str, item: str, error: BaseException) -> str:
    """Record what went wrong with an item, by class.

    A store that went away ends the pass (raised again), counting no attempt.
    Configuration, breaker and budget stops halt LLM work for the pass and burn no
    attempt. Input the backend rejected even after shrinking is quarantined at once.
    Anything else is retried with backoff and quarantined after max_attempts.
    """
    if store_away(error):  # no fault of the item's: the pass ends, and the next does it
        raise error
    message = f"{type(error).__name__}: {error}"
    ctx.state.failed_now.add((job, item))
    if isinstance(error, PASS_STOPPING):
        ctx.state.halt(error, ctx.log)
        return f"{item}: {message[:200]} (no attempt counted)"
    with ctx.store.write() as conn:
        attempts = failure_attempts(conn, job, item) + 1
        quarantine = isinstance(error, InputRejected) or attempts >= ctx.config.jobs.max_attempts
        next_at = ctx.now() + timedelta(seconds=backoff_seconds(ctx.config, attempts))
        record_failure(conn, job, item, message, ctx.now_text(), next_at.isoformat(), quarantine)
    ctx.log.warning(
            "job_item_failed", job=job, item=item, attempts=attempts,
            quarantined=quarantine, error=message[:200],
        )
    return f"{item}: {message[:200]}"


def note_success(ctx: JobContext, job: str, item: str, failures: dict[str, str | None]) -> None:
    if item in failures:
        with ctx.store.write() as conn:
            clear_failure(conn, job, item)

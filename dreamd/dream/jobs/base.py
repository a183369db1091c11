"""What every job shares: its context, the pass budget, and failure bookkeeping."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dreamd.backends import write_gate
from dreamd.backends.llm_output import bounded, estimate_tokens
from dreamd.backends.protocols import Completer, Embedder
from dreamd.backends.validate import AGAIN, Refusal, refusal
from dreamd.config import Config
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.dream.jobs.budget import Budget, Tokens
from dreamd.dream.jobs.topic import ON_TOPIC, topic_score
from dreamd.errors import (
    PASS_STOPPING,
    BudgetExhausted,
    InputRejected,
    OutputInvalid,
    Stopping,
)
from dreamd.logger import Logger, silent
from dreamd.models import JSON_TASKS, Completion, JobSpec, Prompt
from dreamd.store import runs
from dreamd.store.failure import store_away
from dreamd.store.interface import Conn, Store
from dreamd.store.runs import clear_failure, failure_attempts, record_failure
from dreamd.store.state import get_state


def utcnow() -> datetime:
    return datetime.now(UTC)


# Set on a thread while an item is built (or saved) by the extractive fallback: why the
# model's answer for it was rejected.
_FALLING_BACK: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dreamd_falling_back", default=None)


@dataclass(frozen=True)
class FellBack:
    """An item's result built by the extractive producer after the model's answer was
    rejected twice; `why` says what was wrong with it."""

    value: Any
    why: str


@dataclass
class Ledger:
    """What became of the model's answers this pass, by job: counts under the names of
    ANSWER_COUNTS, and per check "refused_first:<check>" (an answer refused when first
    asked) and "dropped:<check>" (a fact dropped from an answer otherwise kept). One for
    the pass, shared by jobs side by side."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, job: str, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts.setdefault(job, Counter())[key] += n

    def of(self, job: str) -> Counter[str]:
        with self.lock:
            return Counter(self.counts.get(job, Counter()))


# asked: answers asked for the first time; kept_first: kept as first given; asked_again:
# asked once more after a refusal that a second request can mend; kept_again: kept then;
# refused: refused for good (twice, or once for what the same model would repeat);
# fell_back: items the extractive producer built instead; reask_tokens: tokens (in and
# out) the requests asked again cost.
ANSWER_COUNTS = ("asked", "kept_first", "asked_again", "kept_again", "refused", "fell_back",
                 "reask_tokens")


@dataclass
class Ends:
    """What ends a pass's work, seen by each of its jobs: jobs side by side (see
    dreamd.dream.lanes) have a context each, holding one of these in common."""

    halted: BaseException | None = None  # backend work stopped (see JobContext.halt)
    invalidated: bool = False  # memory was forgotten during the pass
    # Backend calls still in flight when the stop grace ran out: left to finish unheard.
    abandoned: int = 0
    # What a job beside the others raised (a store fault): the others stop, and the pass
    # raises it once they have.
    failed: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class JobContext:
    store: Store
    config: Config
    embedder: Embedder
    completer: Completer
    budget: Budget
    force: bool = False
    clock: Callable[[], datetime] = utcnow
    log: Logger = field(default_factory=silent)
    progress: Callable[[str, int, int], None] = lambda job, done, total: None
    tokens: Tokens = field(default_factory=Tokens)
    ends: Ends = field(default_factory=Ends)
    notes: list[str] = field(default_factory=list)
    owner: int = field(default_factory=threading.get_ident)
    # The vector epoch when the pass began; a forget (or a session changing owner) bumps
    # it, and then nothing prepared before may be saved.
    epoch: str | None = None
    # The newest turn when the pass sensed its backlog: jobs work up to it, and turns the
    # app writes meanwhile are the next pass's, so a busy app cannot starve later jobs.
    # None outside a pass: the newest turn when a job starts.
    horizon: int | None = None
    # Prompt task -> the job that sends it: its model key and output bound.
    tasks: Mapping[str, JobSpec] = field(default_factory=dict)
    # The users this pass consolidates (a worker's leased users); None: every user.
    users: tuple[str, ...] | None = None
    # A worker's pass: which jobs are due, decided once on every user's backlog.
    due: dict[str, Any] | None = None
    # Items built by the extractive fallback this pass: (job, item, why).
    fell_back: list[tuple[str, str, str]] = field(default_factory=list)
    # (job, item) that failed in this pass: not asked again before the next one.
    failed_now: set[tuple[str, str]] = field(default_factory=set)
    # Writes wait for the pass's LLM workers to stop computing (see write_gate): one gate
    # for every job of the pass, so that none computes while another job writes.
    gate: write_gate.Gate = field(default_factory=write_gate.Gate)
    # Jobs side by side share `completer.workers` calls at once (None: one job at a
    # time, its pool is the limit).
    calls: threading.Semaphore | None = None
    # Second connections opened for jobs side by side: kept for the pass's later rounds
    # and a worker's later batches, closed when the pass ends (see dreamd.dream.lanes).
    spare: list[Store] = field(default_factory=list)
    # A job calls it once it has done what the jobs that need it read, and goes on with
    # work only it reads: side by side (dreamd.dream.lanes), they may start now. One job
    # after another, nothing.
    reached: Callable[[], None] = lambda: None
    # The pass's row in dreamd_runs: the diary's lines name it (None outside a pass).
    run_id: int | None = None
    # What became of the model's answers, by job (see Ledger).
    answers: Ledger = field(default_factory=Ledger)
    _extractive: ExtractiveCompleter | None = None

    def now(self) -> datetime:
        return self.clock()

    @property
    def halted(self) -> BaseException | None:
        return self.ends.halted

    @property
    def invalidated(self) -> bool:
        return self.ends.invalidated

    @property
    def abandoned(self) -> int:
        return self.ends.abandoned

    @property
    def ending(self) -> bool:
        """Memory was forgotten during the pass, or a job beside this one failed: nothing
        more is done in it."""
        return self.ends.invalidated or self.ends.failed is not None

    @property
    def scope(self) -> list[str] | None:
        return None if self.users is None else list(self.users)

    def holds(self, user: str) -> bool:
        """Whether this pass consolidates `user`."""
        return self.users is None or user in self.users

    def now_text(self) -> str:
        return self.clock().isoformat()

    def names_for(self, user_id: str) -> dict[str, str]:
        """Names for prompts: the configured user's name, any other user by their id."""
        user = self.config.user.name if user_id == self.config.user.id else user_id
        return {"user": user, "agent": self.config.agent.name}

    @property
    def llm(self) -> bool:
        return self.completer.name != "extractive"

    @property
    def asks_model(self) -> bool:
        """Whether answers on this thread come from the LLM: it is one, and the item is
        not being built by the extractive fallback (which builds what the offline
        default builds)."""
        return self.llm and _FALLING_BACK.get() is None

    @property
    def fallback(self) -> bool:
        """Whether an item the model keeps failing is built extractively instead."""
        return self.llm and self.config.jobs.fallback

    @contextlib.contextmanager
    def falling_back(self, why: str) -> Iterator[None]:
        """On this thread: answers come from the extractive producer, and what is saved is
        marked as its work (source "fallback:<model>")."""
        token = _FALLING_BACK.set(why)
        try:
            yield
        finally:
            _FALLING_BACK.reset(token)

    def note_fallback(self, job: str, item: str, why: str) -> None:
        """Outside any write: an item the extractive fallback built, for the pass's notes
        and the log."""
        self.fell_back.append((job, item, why))
        self.answers.add(job, "fell_back")
        self.log.warning("fell_back", job=job, item=item, why=why[:200])

    def extractive(self) -> ExtractiveCompleter:
        if self._extractive is None:
            self._extractive = ExtractiveCompleter(self.embedder)
        return self._extractive

    @property
    def workers(self) -> int:
        """Concurrent backend calls: an LLM waits on the network; extraction is CPU-bound."""
        return self.config.completer.workers if self.llm else 1

    @property
    def source(self) -> str:
        """How derived rows are marked: which kind of backend and model made them;
        "fallback:<model>" for the extractive producer's work in place of the model's."""
        kind = "llm" if self.asks_model else "fallback" if self.llm else "extractive"
        return f"{kind}:{getattr(self.completer, 'model', self.completer.name)}"

    def stopped(self) -> bool:
        return self.halted is not None or self.ending or self.budget.exhausted()

    def still_current(self, conn: Conn) -> bool:
        """Inside a write: whether memory was not forgotten since the pass began. Once it
        was, the pass saves nothing more and stops; the next one starts afresh."""
        if get_state(conn, "vector_epoch", "0") != self.epoch:
            self.ends.invalidated = True
        return not self.invalidated

    def abandon(self, calls: int) -> None:
        with self.ends.lock:
            self.ends.abandoned += calls
        self.notes.append(f"stopping: {calls} backend calls still in flight were abandoned "
                          f"after the stop grace; nothing they return is written")
        self.log.warning("calls_abandoned", calls=calls)

    def halt(self, error: BaseException) -> None:
        """Stop backend work for the rest of the pass (configuration, breaker or budget),
        saying once which backend stopped it."""
        with self.ends.lock:
            first = self.halted is None
            if first:
                self.ends.halted = error
        if first:
            self.notes.append(f"{self.stopped_work} for this pass: "
                              f"{type(error).__name__}: {error}")
            event = "embedder_halted" if self.stopped_work.startswith("embedding") \
                else "llm_halted"
            self.log.error(event, reason=type(error).__name__, detail=str(error))

    @property
    def stopped_work(self) -> str:
        """What the halt stopped, in words: "embedding stopped" or "LLM work stopped"."""
        if getattr(self.halted, "part", "") == "embedder":
            return "embedding stopped"
        return "LLM work stopped"

    def _reserve(self, prompt: Prompt) -> int:
        if not self.llm:
            return 0
        estimate = estimate_tokens(prompt.system + prompt.user)
        estimate += self.config.completer.max_output_tokens
        limits = self.config.budget
        with self.tokens.lock:
            if self.halted is not None:
                raise type(self.halted)(str(self.halted))
            pending = self.tokens.used + self.tokens.reserved + estimate
            if limits.tokens_per_pass and pending > limits.tokens_per_pass:
                raise BudgetExhausted(
                    f"the next call (~{estimate} tokens) would pass budget.tokens_per_pass "
                    f"({limits.tokens_per_pass}; {self.tokens.used} used this pass)")
            if limits.tokens_per_day and self.tokens.before_today + pending > limits.tokens_per_day:
                raise BudgetExhausted(
                    f"the next call (~{estimate} tokens) would pass budget.tokens_per_day "
                    f"({limits.tokens_per_day}; {self.tokens.before_today + self.tokens.used} "
                    "used today)")
            self.tokens.reserved += estimate
        return estimate

    def complete(self, prompt: Prompt, check: Callable[[str], Refusal | None] | None = None,
                 again: Again | None = None) -> Completion:
        """Call the Completer: never inside a transaction, within the token budget, with
        the sending job's model and output bound. An LLM's answer that fails a check (see
        backends.validate, `off_topic`, and the job's own `check`) is asked for once more
        where that can mend it (with what was wrong said: `again` builds that request,
        else the instructions get the check's AGAIN), never for what the same model would
        write again; refused for good, it is an error, never memory. Each refusal is
        logged with its reason and counted (see Ledger)."""
        if threading.get_ident() == self.owner and self.store.in_transaction:
            raise RuntimeError("internal: backend call inside a transaction")
        spec = self.tasks.get(prompt.task)
        if spec is not None:
            prompt = dataclasses.replace(prompt, model_key=spec.model_key,
                                         max_chars=spec.bounds[prompt.task])
        if self.llm and not self.asks_model:
            completion = self.extractive().complete(prompt)
            return dataclasses.replace(completion, text=bounded(
                completion.text, prompt.max_chars, prompt.task))
        completion = self._call(prompt)
        if not self.llm:
            return completion
        job = spec.name if spec is not None else prompt.task
        self.answers.add(job, "asked")
        first = self.judged(completion.text, prompt, check)
        if first is None:
            self.answers.add(job, "kept_first")
            return completion
        self.answers.add(job, f"refused_first:{first.check}")
        self.log.info("answer_refused", job=job, task=prompt.task, check=first.check,
                      why=first.why[:200], asked_again=first.mendable)
        if not first.mendable:
            self.answers.add(job, "refused")
            raise Unusable(f"{first.why} (not asked again: the same model would answer "
                           "the same)", first.check)
        retry = again(prompt, first, completion.text) if again is not None else \
            dataclasses.replace(prompt, system=f"{prompt.system} {AGAIN[first.check]}")
        self.answers.add(job, "asked_again")
        completion = self._call(retry)
        self.answers.add(job, "reask_tokens", completion.tokens_in + completion.tokens_out)
        second = self.judged(completion.text, prompt, check)
        if second is not None:
            self.answers.add(job, "refused")
            self.log.warning("answer_refused", job=job, task=prompt.task, check=second.check,
                             why=second.why[:200], asked_again=False)
            raise Unusable(f"{second.why} (asked twice; first: {first.why})", second.check)
        self.answers.add(job, "kept_again")
        return completion

    def judged(self, text: str, prompt: Prompt,
               check: Callable[[str], Refusal | None] | None = None) -> Refusal | None:
        """The first check an answer fails: the guards, off-topic, then the job's own."""
        found = refusal(text, prompt)
        if found is None:
            off = self.off_topic(text, prompt)
            found = Refusal("off-topic", off) if off else None
        if found is None and check is not None:
            found = check(text)
        return found

    def off_topic(self, answer: str, prompt: Prompt) -> str | None:
        """Why a text answer is not about its material, by the embedder (the one model
        whose scale is measured, see ON_TOPIC), or None."""
        floor = ON_TOPIC.get(self.embedder.model)
        if floor is None or prompt.task in JSON_TASKS or not prompt.items:
            return None
        score = topic_score(self.embedder, answer, prompt.items)
        if score >= floor:
            return None
        return f"the answer is not about its input (score {score:.2f}, under {floor})"

    @contextlib.contextmanager
    def call_slot(self) -> Iterator[None]:
        """One of the calls the pass may have out at once, waited for (holding no share
        of the write gate) while jobs side by side use them all."""
        if self.calls is None:
            yield
            return
        with write_gate.waiting():
            self.calls.acquire()
        try:
            # While it waited: no call is made.
            if self.halted is not None:
                raise type(self.halted)(str(self.halted))
            if self.budget.stop() or self.ends.failed is not None:
                raise Stopping("dreamd is stopping: no new calls")
            yield
        finally:
            self.calls.release()

    def _call(self, prompt: Prompt) -> Completion:
        estimate = self._reserve(prompt)
        try:
            with self.call_slot():
                completion = self.completer.complete(prompt)
        except PASS_STOPPING as exc:
            self.halt(exc)  # at once, so a call queued behind this one is never made
            raise
        finally:
            with self.tokens.lock:
                self.tokens.reserved -= estimate
        with self.tokens.lock:
            self.tokens.used_in += completion.tokens_in
            self.tokens.used_out += completion.tokens_out
        # Every backend's answer is bounded here, before any job sees it.
        return dataclasses.replace(completion, text=bounded(completion.text, prompt.max_chars,
                                                            prompt.task))


# Builds the request asked once more: from the request, why its answer was refused, and
# that answer.
Again = Callable[[Prompt, Refusal, str], Prompt]


class Unusable(OutputInvalid):
    """An answer refused for good; `check` names the check that refused it (see
    backends.validate.CHECKS, "off-topic", and the jobs' own)."""

    def __init__(self, why: str, check: str) -> None:
        super().__init__(why)
        self.check = check


def input_hash(prompt: Prompt) -> str:
    return hashlib.sha256(f"{prompt.task}\0{prompt.system}\0{prompt.user}".encode()).hexdigest()


def complete_once(ctx: JobContext, prompt: Prompt, cached: tuple[str, str] | None,
                  check: Callable[[str], Refusal | None] | None = None,
                  again: Again | None = None) -> tuple[Completion, str]:
    """The answer for a prompt, reusing the stored one when the inputs are unchanged:
    an unchanged input costs no tokens. Returns the completion and the input hash."""
    digest = input_hash(prompt)
    if cached is not None and cached[0] == digest:
        return Completion(cached[1], "cache", "cache", extractive=not ctx.llm), digest
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
        elif (job, f.item) in ctx.failed_now:  # the same prompt would fail the same way
            out[f.item] = "failed earlier in this pass"
        elif not ctx.force and f.next_attempt_at > now:
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
    ctx.failed_now.add((job, item))
    if isinstance(error, PASS_STOPPING):
        ctx.halt(error)
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

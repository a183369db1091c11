"""One dream pass: sense → drives → act → record."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from dreamd.backends.protocols import Completer, Embedder
from dreamd.config import Config
from dreamd.dream import drives as drv
from dreamd.dream.jobs.base import JobContext, utcnow
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.registry import JOBS, Registry
from dreamd.dream.lanes import close_spare, run_beside, side_by_side
from dreamd.dream.sensing import read_backlog, sync_owners
from dreamd.dream.workers import Claims
from dreamd.ids import user_keys
from dreamd.logger import Logger, silent
from dreamd.models import BacklogStats, Drives, JobResult, JobSpec, PassResult
from dreamd.store.corrections import prune_diary
from dreamd.store.erasure import finish_pending
from dreamd.store.failure import store_away
from dreamd.store.fallback import fallback_gists_due, send_back
from dreamd.store.interface import Store, WriteLockTimes
from dreamd.store.runs import CUT_SHORT, finish_run, start_run, tokens_since
from dreamd.store.state import get_state
from dreamd.store.tally import sync_tally
from dreamd.store.tiers import save_self_state, self_state, settle_tier_queue

# Drives are rewritten into the self-state only when one moved by more than this, so
# an idle pass leaves the memory file untouched.
DRIVE_EPSILON = 0.01
DIARY_RUNS = 50  # the passes whose diary is kept (status shows the last)


def read_drives(store: Store, agent_id: str) -> Drives:
    with store.read() as conn:
        state = self_state(conn, agent_id)
    return Drives.from_dict(state[0].get("drives") if state else None)


def save_drives(store: Store, agent_id: str, drives: Drives, now: str) -> bool:
    """Mirror the levels into the self-state (the chat app renders them) if they moved."""
    with store.read() as conn:
        state = self_state(conn, agent_id)
    data, updated_at = state if state else ({}, None)
    old = Drives.from_dict(data.get("drives"))
    if state and all(
        abs(a - b) <= DRIVE_EPSILON
        for a, b in zip(old.as_dict().values(), drives.as_dict().values(), strict=True)
    ) and "drives" in data:
        return False
    with store.write() as conn:
        return save_self_state(conn, agent_id, {**data, "drives": drives.as_dict()}, now,
                                 updated_at)


def outcome_of(results: list[JobResult], stopped: bool, budget: Budget,
               after: BacklogStats) -> str:
    if stopped:  # asked to stop: calls refused then are the stop's, not failures
        return "interrupted"
    if any(r.failed for r in results):
        return "failed"
    pending = (after.dirty or after.unembedded_turns or after.unindexed_turns
               or after.gists_newer_than_profile
               or after.stale_months or after.narrative_stale)
    if budget.exhausted() and pending:
        return "partial"
    return "ok"


def run_pass(
    store: Store,
    config: Config,
    embedder: Embedder,
    completer: Completer,
    *,
    trigger: str,
    force: bool = False,
    stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], datetime] = utcnow,
    log: Logger | None = None,
    progress: Callable[[str, int, int], None] = lambda job, done, total: None,
    jobs: Registry = JOBS,
    claims: Claims | None = None,
) -> PassResult:
    """Run one pass of `jobs` and record it in dreamd_runs. Job failures are recorded, not
    raised. With `claims` (a worker on a shared store), the pass consolidates the users
    it can claim, a batch at a time, and the agent's reflection if it can claim that."""
    log = log or silent()
    now = clock()
    store.lock_times = WriteLockTimes()
    with store.write() as conn:
        run_id = start_run(conn, trigger, os.getpid(), now.isoformat(),
                             claims.worker if claims else None)
        prune_diary(conn, DIARY_RUNS)
    budget = Budget(config.pass_.max_seconds, config.pass_.max_items, stop)
    ctx = JobContext.for_pass(store, config, embedder, completer, budget, force=force,
                              clock=clock, log=log, progress=progress, tasks=jobs.by_task(),
                              run_id=run_id)
    with store.read() as conn:
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        ctx.state.tokens.before_today = tokens_since(conn, midnight.isoformat())
    try:
        sync_tally(store)
        sync_owners(store, config.agent.id)
        finish_pending(store)
        retry_fallbacks(ctx)
        with store.read() as conn:
            ctx.state.epoch = get_state(conn, "vector_epoch", "0")
        previous = read_drives(store, config.agent.id)
        stats_before = read_backlog(store, config, now, embedder.model)
        ctx.state.horizon = stats_before.max_exchange_id
        drives_before = drv.levels(stats_before, config, now)
        if claims is None:
            results = run_rounds(ctx, jobs, previous, log)
            settle_queue(ctx, None)
        else:
            results = run_claimed(ctx, jobs, previous, log, claims, stats_before)
        stats_after = read_backlog(store, config, clock(), embedder.model, ctx.state.horizon)
        drives_after = drv.levels(stats_after, config, clock())
        save_drives(store, config.agent.id, drives_after, clock().isoformat())
    except BaseException as exc:
        record_raised(store, run_id, clock().isoformat(), exc)
        raise
    finally:
        close_spare(ctx)
    if ctx.asking.fell_back:
        ctx.state.notes.append(fallback_note(ctx))
    outcome = outcome_of(results, stop(), budget, stats_after)
    write_lock = store.lock_times.as_dict()
    with store.write() as conn:
        finish_run(
            conn, run_id, ended_at=clock().isoformat(), outcome=outcome,
            drives_before=drives_before.as_dict(), drives_after=drives_after.as_dict(),
            stats_before=stats_before.as_dict(), stats_after=stats_after.as_dict(),
            jobs=[r.as_dict() for r in results],
            tokens_in=ctx.state.tokens.used_in, tokens_out=ctx.state.tokens.used_out,
            notes=ctx.state.notes or None, write_lock=write_lock,
        )
    store.checkpoint_log()
    log.info("pass_finished", run=run_id, trigger=trigger, outcome=outcome,
             ran=[r.job for r in results if r.ran],
             stored=[r.job for r in results if r.done],
             drives=drives_after.as_dict(), write_lock=write_lock)
    return PassResult(run_id, outcome, drives_before, drives_after, stats_before, stats_after,
                      tuple(results), tuple(ctx.state.notes), ctx.state.tokens.used_in,
                      ctx.state.tokens.used_out, write_lock)


def record_raised(store: Store, run_id: int, ended_at: str, exc: BaseException) -> None:
    """A pass that raised: its row says so, or that the store cut it short. While the
    store is still away that row stays 'running' until the worker finds it back
    (dreamd.runtime.outage)."""
    away = store_away(exc)
    try:
        with store.write() as conn:
            finish_run(conn, run_id, ended_at=ended_at, outcome=CUT_SHORT if away else "error",
                       error=(f"cut short, the store went away: {exc}" if away else
                              f"{type(exc).__name__}: {exc}")[:500])
    except Exception as again:
        if not (away and store_away(again)):
            raise


def run_claimed(ctx: JobContext, jobs: Registry, previous: Drives, log: Logger,
                claims: Claims, stats: BacklogStats) -> list[JobResult]:
    """A worker's pass: which jobs are due is decided once, on every user's backlog; then
    batch after batch of claimed users gets those jobs, and the agent's jobs (reflect)
    run if this worker can claim the agent."""
    due = {job.name: drv.decide_job(job, stats, previous, ctx.config, ctx.now(),
                                    force=ctx.deps.force) for job in jobs}
    ctx.state.due = due
    per_user = Registry(tuple(j for j in jobs if j.name not in AGENT_JOBS))
    per_agent = Registry(tuple(j for j in jobs if j.name in AGENT_JOBS))
    results: dict[str, JobResult] = {}
    waiting = claims.waiting(ctx.embedder.model) if len(per_user) else []
    try:
        while not ctx.state.stopped() and not ctx.state.budget.exhausted() and waiting:
            batch = claims.users(waiting)
            if not batch:
                break
            waiting = [u for u in waiting if u not in batch]
            ctx.state.users = batch
            try:
                for r in run_rounds(ctx, per_user, previous, log):
                    results[r.job] = merged(results[r.job], r) if r.job in results else r
                settle_queue(ctx, list(batch))
            finally:
                ctx.state.users = None
                claims.release(batch)
        waits = (any(due[job.name].due for job in per_agent) and not ctx.state.stopped()
                 and leaves_reflection(ctx, claims, stats))
        if waits:
            for job in per_agent:
                results[job.name] = JobResult(job.name, False, waits)
        elif len(per_agent) and not ctx.state.stopped() and claims.agent():
            try:
                for r in run_rounds(ctx, per_agent, previous, log):
                    results[r.job] = r
            finally:
                claims.release_agent()
    finally:
        ctx.state.due = None
        claims.end_pass()
    return [results.get(job.name) or JobResult(job.name, False, due[job.name].reason
                                               if not due[job.name].due else
                                               "another worker holds its users")
            for job in jobs]


def leaves_reflection(ctx: JobContext, claims: Claims, stats: BacklogStats) -> str:
    """Why this worker leaves the agent's jobs to another (empty: it does not). While other
    workers still hold users, their gists are still to come, and a reflection now would
    see those users' turns and then their gists again: the last worker to let its users
    go reflects. Unless the last reflection is older than `reflect.hours_scale`: a fleet
    that is never idle reflects anyway, once in that while."""
    busy = claims.others_consolidating()
    if not busy:
        return ""
    hours = drv.hours_between(stats.last_reflection_at, ctx.now())
    if hours is not None and hours > ctx.config.reflect.hours_scale:
        return ""
    return f"left to the last worker out: others still hold {busy} users"


def settle_queue(ctx: JobContext, users: list[str] | None) -> None:
    """Users whose tiers are now all current leave the queue sensing reads."""
    if not ctx.state.invalidated and not ctx.state.stopped():
        with ctx.store.write(*user_keys(users)) as conn:
            settle_tier_queue(conn, users)


# Jobs over every user's memory at once: they run under the agent's lease.
AGENT_JOBS = frozenset({"reflect"})


# While a later job may have work, a job may use at most this share of what is left of
# the pass: every due job gets its turn, and what a job leaves flows on to the next.
JOB_SHARE = 0.5
MAX_ROUNDS = 8


def run_rounds(ctx: JobContext, jobs: Registry, previous: Drives, log: Logger
               ) -> list[JobResult]:
    """Every job, each within its share of the pass (in order, or side by side: see
    dreamd.dream.lanes); then, while the budget lasts and a round made progress on work
    that remains, another round, in order, in which a job runs again if it left work or
    a job before it did some."""
    order = list(jobs)

    def share(job: JobSpec) -> float:
        return 1.0 if job is order[-1] else JOB_SHARE

    if side_by_side(ctx):  # the first round: each job once the jobs it needs are done
        results = run_beside(ctx, jobs, lambda here, job, part: run_job(
            here, job, previous, log, part), share)
    else:
        results = [run_job(ctx, job, previous, log, share(job)) for job in order]
    for _ in range(MAX_ROUNDS - 1):
        if ctx.state.stopped() or not any(r.done and r.remaining for r in results):
            break
        again: list[JobResult] = []
        for job, before in zip(order, results, strict=True):
            fed = any(r.done for r in again)
            if before.remaining or fed:
                again.append(run_job(ctx, job, previous, log))
            else:
                again.append(JobResult(job.name, False, "nothing left from the last round"))
        results = [merged(a, b) for a, b in zip(results, again, strict=True)]
    return results


def merged(first: JobResult, then: JobResult) -> JobResult:
    """One job's result over two rounds."""
    if not then.ran:
        return first
    if not first.ran:
        return then
    return dataclasses.replace(
        first, done=first.done + then.done, failed=first.failed + then.failed,
        skipped=first.skipped + then.skipped, remaining=then.remaining,
        tokens_in=first.tokens_in + then.tokens_in, tokens_out=first.tokens_out + then.tokens_out,
        errors=(first.errors + then.errors)[:10], seconds=first.seconds + then.seconds,
        answers=dict(Counter(first.answers) + Counter(then.answers)))


def run_job(ctx: JobContext, job: JobSpec, previous: Drives, log: Logger, share: float = 1.0
            ) -> JobResult:
    """Re-sense, decide this one job, and run it if due: gists made by summarize raise
    coherence, so integration follows in the same pass."""
    name = job.name
    if ctx.state.budget.exhausted():
        return JobResult(name, False, "pass budget exhausted or stop requested")
    if ctx.state.invalidated:
        return JobResult(name, False, "not run: memory was forgotten during this pass; "
                         "the next pass starts afresh")
    if ctx.state.halted is not None and job.bounds:  # a job that calls the backends
        return JobResult(name, False, f"not run: {ctx.state.stopped_work} for this pass "
                         f"({type(ctx.state.halted).__name__}, see the pass's note)")
    stats = read_backlog(ctx.store, ctx.config, ctx.now(), ctx.embedder.model, ctx.state.horizon,
                         ctx.state.scope)
    decision = drv.decide_job(job, stats, previous, ctx.config, ctx.now(), force=ctx.deps.force)
    # A worker's batch: a job due on every user's backlog at the start of the pass runs
    # for the batch's users that have work for it.
    due = ctx.state.due
    if (due is not None and name in due and not decision.due and due[name].due
            and job.work(stats, ctx.deps.force, ctx.config)[0]):
        decision = due[name]
    if not decision.due:
        return JobResult(name, False, decision.reason)
    started = time.monotonic()
    tokens = ctx.state.tokens
    used_in, used_out = tokens.used_in, tokens.used_out
    answered = ctx.asking.answers.of(name)
    cut = ""
    try:
        with ctx.state.budget.share(share):
            result = job.run(ctx, decision.reason)
            cut = cut_short(ctx, share)
    except Exception as exc:  # a bug or a broken file in one job must not end the pass
        if store_away(exc):  # but a store that is away ends it: no job can go on
            raise
        result = JobResult(name, True, decision.reason, failed=1,
                           errors=(f"{type(exc).__name__}: {exc}"[:300],))
    if cut and result.remaining:
        result = dataclasses.replace(result, errors=(
            f"{cut} with {result.remaining} left for the next round or pass",
            *result.errors))
    result = dataclasses.replace(
        result, seconds=time.monotonic() - started,
        tokens_in=tokens.used_in - used_in, tokens_out=tokens.used_out - used_out,
        answers=dict(ctx.asking.answers.of(name) - answered),
    )
    if result.answers:
        log.info("answers", job=name, **result.answers)
    if result.done or result.failed:
        log.info("job_finished", job=name, done=result.done, failed=result.failed,
                 skipped=result.skipped, remaining=result.remaining, reason=result.reason)
    return result


def cut_short(ctx: JobContext, share: float) -> str:
    """Why a job stopped with work left, in words, if a budget stopped it."""
    budget = ctx.state.budget
    if budget.stop():
        return ""
    if budget.pass_exhausted():
        limit = (f"pass.max_items = {budget.max_items}" if budget.max_items
                 and budget.items >= budget.max_items
                 else f"pass.max_seconds = {budget.max_seconds:g}")
        return f"stopped by the pass's budget ({limit})"
    if budget.share_exhausted():
        return f"stopped at its share of the pass ({share:.0%} of what was left)"
    return ""


def retry_fallbacks(ctx: JobContext) -> None:
    """Gists the extractive fallback made more than jobs.fallback_retry_hours ago go back
    to the model (the tiers above follow the new gists)."""
    if not ctx.asking.fallback:
        return
    made_before = (ctx.now() - timedelta(hours=ctx.config.jobs.fallback_retry_hours)
                   ).isoformat()
    with ctx.store.read() as conn:  # a look first: most passes have none to send back
        if not fallback_gists_due(conn, made_before, ctx.state.scope):
            return
    # Before any claim, a shared store's workers send back everyone's: alone.
    with ctx.store.write(*user_keys(ctx.state.scope),
                         alone=ctx.store.shared and ctx.state.scope is None) as conn:
        again = send_back(conn, made_before, ctx.state.scope)
    if again:
        ctx.log.info("fallback_retried", gists=again)


def fallback_note(ctx: JobContext) -> str:
    """What the fallback built this pass, by job, and the first reason."""
    jobs = Counter(job for job, _, _ in ctx.asking.fell_back)
    _, item, why = ctx.asking.fell_back[0]
    return (f"the extractive fallback built {len(ctx.asking.fell_back)} items whose model answers "
            f"were rejected twice ({', '.join(f'{j} {n}' for j, n in jobs.items())}; "
            f"first, {item}: {why[:160]}); the model is asked again after "
            f"{ctx.config.jobs.fallback_retry_hours:g} h")


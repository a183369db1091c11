"""Jobs side by side: a round of a pass with an LLM that takes several calls at once.

One job after another, a pass waits for each: facts' few large calls, then summarize's
many, then profile's, eras' and reflect's one or two each, though none of these reads
what the one before it writes. So where the completer is an LLM with `workers` above 1,
the first round of a pass starts each job as soon as the jobs it needs (`JobSpec.needs`)
are done, or have done what other jobs read (`JobContext.reached`): embed and facts at
once, summarize when embed has the turns' vectors (the words index it goes on to build is
recall's), profile, eras and reflect together once summarize and facts are done,
narrative last. Each job runs on a thread of its own, with its own connection to the
store (`Store.sibling`: on SQLite one writer in the process at a time, on PostgreSQL the
same keys as any other writer), and its own share of the pass's budget. They share what
a pass shares: the budget's time and items, the token count, the stops (`Ends`),
`completer.workers` calls at once among them all (`Threads.calls`), and the write
gate: every write of the round closes it (`Store.quiet`), and a job's own thread holds a
share of it while it computes, as the LLM threads do, so that no thread of the pass holds
the GIL while one writes. (Without that, a job's write beside another job's computing
held the lock longer, and the chat app's INSERT p99 during an 8-worker pass rose from +3
to +7 ms.)

Without an LLM, or with one worker, jobs run one after another on the pass's thread: the
extractive producer is bound by the CPU, and one call at a time has nothing to overlap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.registry import Registry
from dreamd.errors import StoreError
from dreamd.models import JobResult, JobSpec
from dreamd.store.interface import Store

RunJob = Callable[[JobContext, JobSpec, float], JobResult]

# How often the pass's thread looks up from waiting on its jobs (signals are handled on
# it between waits).
WAKE_SECONDS = 0.5


def side_by_side(ctx: JobContext) -> bool:
    """Whether jobs of a round run side by side: an LLM with several calls at once."""
    return ctx.asking.llm and ctx.asking.calls_at_once > 1


def run_beside(ctx: JobContext, jobs: Registry, run_job: RunJob,
               share: Callable[[JobSpec], float]) -> list[JobResult]:
    """Each job of `jobs`, started once the jobs it needs are done (or have reached the
    point past which they do what no other job reads: `JobContext.reached`), on a thread
    and a connection of its own; their results in the registry's order. A job that
    raises (a store fault: `run_job` records a job's own failures) stops the others
    (`Ends.failed`), and is raised here once they have ended."""
    ctx.threads.calls = threading.BoundedSemaphore(ctx.asking.calls_at_once)
    # Connections no job is using: the pass's own, and those opened earlier in the pass.
    free: list[Store] = [*ctx.threads.spare, ctx.store]
    for each in free:
        each.quiet = ctx.threads.gate.closed
    more = True  # whether another connection may be opened
    results: dict[str, JobResult] = {}
    reached: set[str] = set()
    moved = threading.Event()  # a job ended, or reached that point
    running: dict[Future[JobResult], tuple[JobSpec, Store]] = {}

    def reach(name: str) -> None:
        reached.add(name)
        moved.set()

    pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="dreamd-job")
    try:
        while len(results) < len(jobs) and ctx.state.ends.failed is None:
            busy = {job.name for job, _ in running.values()}
            for job in jobs:
                if not _ready(jobs, job, results.keys() | busy, results.keys() | reached):
                    continue
                store = free.pop() if free else sibling(ctx) if more else None
                if store is None:
                    more = False  # the job starts when a running one gives its back
                    break
                if store is not ctx.store and store not in ctx.threads.spare:
                    store.quiet = ctx.threads.gate.closed
                    ctx.threads.spare.append(store)
                future = pool.submit(lane, ctx, store, job, run_job, share(job),
                                     functools.partial(reach, job.name))
                future.add_done_callback(lambda _: moved.set())
                running[future] = (job, store)
            if not running:
                break
            moved.wait(WAKE_SECONDS)
            moved.clear()  # before looking: what moves from here on wakes the next wait
            _collect(ctx, running, free, results)
    except BaseException as exc:  # the pass's own thread: the jobs stop too
        ctx.state.ends.failed = ctx.state.ends.failed or exc
        raise
    finally:
        pool.shutdown(wait=True)
        for each in (ctx.store, *ctx.threads.spare):
            each.quiet = contextlib.nullcontext
        ctx.threads.calls = None
    if ctx.state.ends.failed is not None:
        raise ctx.state.ends.failed
    return [results[job.name] for job in jobs]


def _ready(jobs: Registry, job: JobSpec, started: set[str], done: set[str]) -> bool:
    """Whether `job` may start: not started yet, and what it needs done (or reached)."""
    return job.name not in started and set(jobs.needs(job)) <= done


def _collect(ctx: JobContext, running: dict[Future[JobResult], tuple[JobSpec, Store]],
             free: list[Store], results: dict[str, JobResult]) -> None:
    """The jobs that ended: their results kept, their connections free again; a job that
    raised stops the others (raised once they have ended)."""
    for future in [f for f in running if f.done()]:
        job, store = running.pop(future)
        free.append(store)
        try:
            results[job.name] = future.result()
        except BaseException as exc:
            ctx.state.ends.failed = ctx.state.ends.failed or exc


def lane(ctx: JobContext, store: Store, job: JobSpec, run_job: RunJob, share: float,
         reach: Callable[[], None]) -> JobResult:
    """On a job's own thread: the job with the pass's context, on `store`, holding a share
    of the write gate while it computes (it gives it back while it waits)."""
    here = dataclasses.replace(ctx, deps=dataclasses.replace(ctx.deps, store=store),
                               owner=threading.get_ident(), reached=reach)
    return ctx.threads.gate.run(lambda _: run_job(here, job, share), None)


def close_spare(ctx: JobContext) -> None:
    """At the end of the pass: the second connections its jobs side by side opened."""
    for store in ctx.threads.spare:
        try:
            store.close()
        except Exception as exc:  # a connection that will not close is gone anyway
            ctx.log.warning("second_connection_not_closed", error=str(exc)[:200])
    ctx.threads.spare.clear()


def sibling(ctx: JobContext) -> Store | None:
    """A second connection for a job beside the others; None where none can be opened
    (the job then waits for one that is in use)."""
    try:
        return ctx.store.sibling()
    except StoreError as exc:
        ctx.log.warning("no_second_connection", error=str(exc)[:200])
        return None

"""Many items through the backend at once, with the database kept on one thread.

prepare (short read) and save (inside a short write) run on the pass's own thread, which
owns the connection; think (backend calls, no database) runs in a bounded pool. The pass
thread never waits for a backend answer inside a transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from dreamd.backends import write_gate
from dreamd.dream.jobs.asking import FellBack
from dreamd.dream.jobs.base import JobContext, failed_items, note_failure
from dreamd.errors import OutputInvalid
from dreamd.ids import user_key
from dreamd.models import JobResult
from dreamd.store.interface import Conn
from dreamd.store.runs import clear_failure, drop_outputs

Save = Callable[[Conn, Any, Any], bool]


@dataclass
class ItemCounts:
    done: int = 0
    failed: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def run_items(
    ctx: JobContext,
    items: Iterable[Any],
    prepare: Callable[[Any], Any],
    think: Callable[[Any], Any],
    save: Save,
    on_error: Callable[[Any, BaseException], str],
    after: Callable[[ItemCounts], None] = lambda counts: None,
    keys: Callable[[Any], list[str]] = lambda inputs: [],
) -> ItemCounts:
    """Each item: prepare → think → save; errors go to on_error, the rest carry on.

    `prepare` returning None skips the item; `think` returning None leaves it unsaved;
    `after` runs on the pass thread once an item is settled, outside any transaction;
    `keys` names what an item's write changes (see `Store.write`).
    """
    # Backend calls run in the pool, so the pass thread can stop waiting for a hung one;
    # each write waits for the pool's threads to stop computing (see backends.write_gate).
    pooled = ctx.asking.llm or ctx.asking.calls_at_once > 1
    gate = ctx.threads.gate if pooled else None
    run = _Saving(ctx, save, on_error, after, keys,
                  gate.closed if gate is not None else contextlib.nullcontext)
    if gate is None:
        _one_by_one(run, items, prepare, think)
    else:
        _side_by_side(run, items, prepare, think, gate)
    return run.counts


@dataclass
class _Saving:
    """What run_items does with an item once the backend has answered (or failed)."""

    ctx: JobContext
    save: Save
    on_error: Callable[[Any, BaseException], str]
    after: Callable[[ItemCounts], None]
    keys: Callable[[Any], list[str]]
    quiet_write: Callable[[], contextlib.AbstractContextManager[object]]
    counts: ItemCounts = field(default_factory=ItemCounts)

    def finish(self, item: Any, inputs: Any, value: Any, error: BaseException | None) -> None:
        self._settle(item, inputs, value, error)
        self.after(self.counts)

    def _settle(self, item: Any, inputs: Any, value: Any, error: BaseException | None) -> None:
        ctx, counts = self.ctx, self.counts
        if error is None and value is not None:
            try:
                with self.quiet_write(), ctx.store.write(*self.keys(inputs)) as conn:
                    stored = ctx.state.still_current(conn) and self.save(conn, inputs, value)
            except Exception as exc:  # a failed write is recorded like a failed call
                error = exc
            else:
                counts.done += int(stored)
                counts.skipped += int(not stored)
                if stored:
                    ctx.state.budget.spend()
                return
        if error is None:
            counts.skipped += 1
            return
        counts.errors.append(self.on_error(item, error))
        counts.failed += 1


def _one_by_one(run: _Saving, items: Iterable[Any], prepare: Callable[[Any], Any],
                think: Callable[[Any], Any]) -> None:
    """On the pass's own thread, an item at a time."""
    for item in items:
        if run.ctx.state.stopped():
            break
        inputs = prepare(item)
        if inputs is None:
            continue
        try:
            value = think(inputs)
        except Exception as exc:  # one bad item must not stop the pass
            run.finish(item, inputs, None, exc)
            continue
        run.finish(item, inputs, value, None)


def _side_by_side(run: _Saving, items: Iterable[Any], prepare: Callable[[Any], Any],
                  think: Callable[[Any], Any], gate: write_gate.Gate) -> None:
    """Up to `calls_at_once` backend calls on a thread pool; prepare and save stay on
    the pass's thread."""
    ctx = run.ctx
    in_flight: dict[Future[Any], tuple[Any, Any]] = {}
    iterator = iter(items)
    exhausted = False
    clock = StopClock(ctx)
    pool = ThreadPoolExecutor(max_workers=ctx.asking.calls_at_once, thread_name_prefix="dreamd-llm")
    try:
        while True:
            if not exhausted:
                exhausted = _send_more(ctx, iterator, in_flight,
                                       lambda inputs: pool.submit(gate.run, think, inputs),
                                       prepare)
            if not in_flight:
                break
            if clock.stopping():
                for future in [f for f in in_flight if f.cancel()]:
                    del in_flight[future]  # queued, never started: no call is made
            if clock.lapsed():
                ctx.state.abandon(len(in_flight), ctx.log)  # whatever they return is never written
                in_flight.clear()
                break
            # Wake now and then: the stop check between waits is the pass's heartbeat.
            with write_gate.waiting():
                done, _ = wait(in_flight, timeout=HEARTBEAT_SECONDS,
                               return_when=FIRST_COMPLETED)
            for future in done:
                item, inputs = in_flight.pop(future)
                error = future.exception()
                run.finish(item, inputs, None if error else future.result(), error)
            if ctx.state.stopped():
                exhausted = True  # finish what is in flight, start nothing new
    finally:
        with write_gate.waiting():
            pool.shutdown(wait=not ctx.state.abandoned, cancel_futures=True)


def _send_more(ctx: JobContext, iterator: Iterator[Any],
               in_flight: dict[Future[Any], tuple[Any, Any]],
               submit: Callable[[Any], Future[Any]], prepare: Callable[[Any], Any]) -> bool:
    """Keep twice `calls_at_once` calls in flight while the pass goes on; True once the items
    have run out."""
    while len(in_flight) < ctx.asking.calls_at_once * 2 and not ctx.state.stopped():
        item = next(iterator, _END)
        if item is _END:
            return True
        inputs = prepare(item)
        if inputs is not None:
            in_flight[submit(inputs)] = (item, inputs)
    return False


HEARTBEAT_SECONDS = 0.5


def stop_grace(ctx: JobContext) -> float:
    """How long calls in flight may still finish after a stop request: half the process's
    grace, so the pass can still record itself before the process must go."""
    return ctx.config.pass_.stop_grace_seconds / 2


class StopClock:
    """For a thread waiting on calls in flight: whether the pass was asked to stop (seen
    between waits), and whether the calls have since had their grace."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.seen: float | None = None

    def stopping(self) -> bool:
        if self.seen is None and self.ctx.state.budget.stop():
            self.seen = time.monotonic()
        return self.seen is not None

    def lapsed(self) -> bool:
        """Stopping, and the calls still out are past `stop_grace`: give them up."""
        if not self.stopping():
            return False
        assert self.seen is not None
        return time.monotonic() - self.seen >= stop_grace(self.ctx)


_END = object()


class ItemWork(Protocol):
    """What a keyed job's `prepare` reads for an item: it names the item and its user."""

    @property
    def key(self) -> str: ...

    @property
    def user_id(self) -> str: ...


Item = TypeVar("Item")
Work = TypeVar("Work", bound=ItemWork)
Result = TypeVar("Result")


class KeyedJob(Protocol[Item, Work, Result]):
    """A job whose work comes in keyed items (a session, a user, a user's month), each
    read, thought over and written apart; `run_keyed` drives it. An instance lasts one
    run of the job, and may keep what the run read once."""

    name: str
    progress: bool  # whether the pass's progress is told after each item

    def todo(self, ctx: JobContext) -> list[Item]:
        """The items due now, in the order they are done."""
        ...

    def remaining(self, ctx: JobContext) -> int:
        """The items still due after the run (the pass's budget ran out)."""
        ...

    def key(self, item: Item) -> str:
        """The item's name in the failure book."""
        ...

    def prepare(self, ctx: JobContext, item: Item) -> Work | None:
        """A short read: what thinking needs; None when the item has nothing to do."""
        ...

    def think(self, ctx: JobContext, work: Work) -> Result | None:
        """With no transaction open: the model's call, or the extractive producer's
        work; None leaves the item unsaved."""
        ...

    def save(self, ctx: JobContext, conn: Conn, work: Work, result: Result) -> bool:
        """Inside the item's write (its user's lock): whether it was stored (False: its
        inputs changed meanwhile)."""
        ...


def run_keyed(ctx: JobContext, keyed: KeyedJob[Item, Work, Result], reason: str
              ) -> JobResult:
    """run_items for a job whose items have keys in the failure book: quarantined and
    backing-off items wait, a success clears the item's record. Each item's inputs name
    its user (`user_id`): its write holds that user's lock."""
    job, todo, key = keyed.name, keyed.todo(ctx), keyed.key
    failures = failed_items(ctx, job)
    blocked = [key(item) for item in todo if failures.get(key(item))]
    fallen: list[tuple[str, str]] = []  # (item, why) the fallback built, noted after

    def think_or_fall_back(inputs: Work) -> Result | FellBack | None:
        """The model's result; where its answers were rejected twice, the extractive
        producer's (unless jobs.fallback is off)."""
        try:
            return keyed.think(ctx, inputs)
        except OutputInvalid as exc:
            if not ctx.asking.fallback:
                raise
            why = str(exc)
        with ctx.asking.falling_back(why):
            value = keyed.think(ctx, inputs)
        return None if value is None else FellBack(value, why)

    def save_and_clear(conn: Conn, inputs: Work, value: Result | FellBack) -> bool:
        if isinstance(value, FellBack):
            with ctx.asking.falling_back(value.why):
                stored = keyed.save(ctx, conn, inputs, value.value)
            if stored:
                # Not kept as the answer to this input: an unchanged input next time
                # must go to the model, not come back from the cache as the model's.
                drop_outputs(conn, job, inputs.key)
                fallen.append((inputs.key, value.why))
        else:
            stored = keyed.save(ctx, conn, inputs, value)
        if stored and inputs.key in failures:
            clear_failure(conn, job, inputs.key)
        return stored

    counts = run_items(
        ctx,
        (item for item in todo if not failures.get(key(item))),
        prepare=lambda item: keyed.prepare(ctx, item),
        think=think_or_fall_back,
        save=save_and_clear,
        on_error=lambda item, exc: note_failure(ctx, job, key(item), exc),
        after=(lambda t: ctx.deps.progress(job, t.done + t.failed + t.skipped, len(todo)))
        if keyed.progress else (lambda t: None),
        keys=lambda inputs: [user_key(inputs.user_id)],
    )
    for item, why in fallen:
        ctx.asking.note_fallback(job, item, why)
    errors = tuple(counts.errors) + tuple(f"{k}: {failures[k]}" for k in blocked[:5])
    return JobResult(job, True, reason, done=counts.done, failed=counts.failed,
                     skipped=counts.skipped + len(blocked), remaining=keyed.remaining(ctx),
                     errors=errors)

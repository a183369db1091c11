"""The write gate ("quiet writes"): the pass thread writes while no LLM worker runs Python.

A worker that builds a request or parses an answer holds the GIL, and the pass thread,
inside a write transaction, needs the GIL back after every SQL statement. With eight
workers answering at once, a 0.3 ms transaction stretched past 10 ms, and the chat app's
INSERT waited behind the lock for all of it (`python -m bench.llm throughput`).

So the pool's workers hold a share of a gate while they compute and give it back while
they wait on the network (the backends mark those waits with `pause`/`resume`, and the
local model's runs, which let go of the GIL, with `waiting`). The
pass thread closes the gate around each write: it waits, at most `DRAIN_SECONDS`, for
the shares to come back, and a worker that wants one meanwhile waits until the write is
done. Jobs that run side by side (dreamd.dream.lanes) share one gate: it stays closed
while any of their threads writes. The gate only schedules; nothing depends on it for
correctness.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

DRAIN_SECONDS = 0.1

_local = threading.local()


class Gate:
    def __init__(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        self.drain_seconds = drain_seconds
        self._cond = threading.Condition()
        self._busy = 0
        self._closers = 0  # pass threads inside `closed` now

    @property
    def busy(self) -> int:
        """How many workers hold a share (compute) now."""
        with self._cond:
            return self._busy

    def _enter(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._closers)
            self._busy += 1

    def _leave(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._busy == 0:
                self._cond.notify_all()

    def run(self, fn: Callable[[Any], T], arg: Any) -> T:
        """In a worker thread: fn(arg) holding a share, except where fn pauses."""
        _local.gate, _local.held = self, False
        try:
            resume()
            return fn(arg)
        finally:
            pause()
            _local.gate = None

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        """In a pass thread: no worker computes inside this block (unless one is still
        busy after `drain_seconds`, in which case the block runs anyway). Workers go on
        once no pass thread is inside it. A thread that holds a share (a job's own
        thread, beside others) gives it back for the block, and takes none inside it; a
        block inside another on the same thread waits for nothing more."""
        depth = getattr(_local, "closing", 0)
        held = depth == 0 and getattr(_local, "gate", None) is self and _local.held
        if held:
            pause()
        with self._cond:
            self._closers += 1
            if depth == 0:
                self._cond.wait_for(lambda: self._busy == 0, self.drain_seconds)
        _local.closing = depth + 1
        try:
            yield
        finally:
            _local.closing = depth
            with self._cond:
                self._closers -= 1
                if not self._closers:
                    self._cond.notify_all()
            if held:
                resume()


def pause() -> None:
    """About to wait on the network or sleep: give the share back (no-op outside a gate)."""
    gate = getattr(_local, "gate", None)
    if gate is not None and _local.held:
        _local.held = False
        gate._leave()


def resume() -> None:
    """About to compute again: take a share, waiting while the gate is closed (no-op
    outside a gate, and inside this thread's own closed block: it would wait on itself)."""
    gate = getattr(_local, "gate", None)
    if gate is not None and not _local.held and not getattr(_local, "closing", 0):
        gate._enter()
        _local.held = True


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """A block that only waits (network, backoff sleep): workers hold no share in it."""
    pause()
    try:
        yield
    finally:
        resume()

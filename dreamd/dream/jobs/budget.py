"""What a pass may spend: its time and items (`Budget`), and the tokens its calls use
(`Tokens`); one of each per pass, shared by the jobs that run side by side."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Budget:
    """The per-pass budget: wall time and items, plus the stop flag a signal may set.

    A job runs inside a share of what is left (`share`), so one job with a big backlog
    cannot spend the whole pass while the jobs after it wait; what a job leaves unused
    flows on to the next. A share is the running thread's: jobs side by side (see
    dreamd.dream.lanes) each have their own, and spend from the one pass."""

    max_seconds: float = 0.0
    max_items: int = 0
    stop: Callable[[], bool] = lambda: False
    started: float = field(default_factory=time.monotonic)
    items: int = 0
    _shares: threading.local = field(default_factory=threading.local, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def share_until(self) -> float | None:
        return getattr(self._shares, "until", None)

    @property
    def share_items(self) -> int | None:
        return getattr(self._shares, "items", None)

    def exhausted(self) -> bool:
        return self.pass_exhausted() or self.share_exhausted()

    def pass_exhausted(self) -> bool:
        if self.stop():
            return True
        if self.max_items and self.items >= self.max_items:
            return True
        return bool(self.max_seconds) and time.monotonic() - self.started >= self.max_seconds

    def share_exhausted(self) -> bool:
        if self.share_items is not None and self.items >= self.share_items:
            return True
        return self.share_until is not None and time.monotonic() >= self.share_until

    @contextlib.contextmanager
    def share(self, fraction: float) -> Iterator[None]:
        """On this thread, limit what runs inside to `fraction` of the time and items left
        (at least one item). A fraction of 1 is the rest of the pass."""
        if fraction < 1:
            if self.max_seconds:
                left = self.max_seconds - (time.monotonic() - self.started)
                self._shares.until = time.monotonic() + max(0.0, left) * fraction
            if self.max_items:
                self._shares.items = self.items + max(1, int((self.max_items - self.items)
                                                             * fraction))
        try:
            yield
        finally:
            self._shares.until = self._shares.items = None

    def spend(self, n: int = 1) -> None:
        with self._lock:
            self.items += n

    def room(self) -> int:
        """Items this job may still spend (at least one; a large number when unlimited)."""
        limits = [m for m in (self.max_items, self.share_items) if m]
        return max(1, min(limits, default=self.items + 1_000_000) - self.items)


@dataclass
class Tokens:
    """Token use of this pass, and reservations for calls in flight (thread-safe)."""

    used_in: int = 0
    used_out: int = 0
    reserved: int = 0
    before_today: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def used(self) -> int:
        return self.used_in + self.used_out

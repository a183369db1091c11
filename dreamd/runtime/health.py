"""What the watchdog watches: a pass's beats, and the deadlines of its backend calls."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Health:
    """Progress as the watchdog sees it: a pass must keep beating, idle time is fine, and
    a backend call on the pass thread counts as progress until its own deadline."""

    running: bool = False
    last_beat: float = field(default_factory=time.monotonic)
    busy_until: float = 0.0

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Work the watchdog must see progress in (a pass, the write after it)."""
        self.running = True
        self.beat()
        try:
            yield
        finally:
            self.running = False

    def healthy(self, limit: float) -> bool:
        now = time.monotonic()
        return not self.running or now - self.last_beat < limit or now < self.busy_until


class WatchedEmbedder:
    """An embedder whose calls tell the watchdog they are bounded by `deadline` seconds
    (embedding runs on the pass thread; LLM calls run in a pool the pass thread watches)."""

    def __init__(self, inner: Any, health: Any, deadline: float) -> None:
        """`health`: a `Health`, or a pass process's `Beats`, which sends to its daemon's."""
        from dreamd.backends.protocols import Glancer

        self.inner, self.health, self.deadline = inner, health, deadline
        self.model = inner.model
        if isinstance(inner, Glancer):  # no model run: nothing for the watchdog to wait on
            self.glance = inner.glance

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: list[str]) -> Any:
        self.health.busy_until = time.monotonic() + self.deadline
        try:
            return self.inner.embed(texts)
        finally:
            self.health.busy_until = 0.0
            self.health.beat()

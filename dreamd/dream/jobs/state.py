"""What a pass's jobs share while it runs: its budget and tokens, what ends it, its
notes, and whose memory it consolidates."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from dreamd.dream.jobs.budget import Budget, Tokens
from dreamd.logger import Logger
from dreamd.store.interface import Conn
from dreamd.store.state import get_state


@dataclass
class Ends:
    """What ends a pass's work, seen by each of its jobs (jobs side by side, see
    dreamd.dream.lanes, share it)."""

    halted: BaseException | None = None  # backend work stopped (see PassState.halt)
    invalidated: bool = False  # memory was forgotten during the pass
    # Backend calls still in flight when the stop grace ran out: left to finish unheard.
    abandoned: int = 0
    # What a job beside the others raised (a store fault): the others stop, and the pass
    # raises it once they have.
    failed: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class PassState:
    """The state of one pass, shared by its jobs (side by side too)."""

    budget: Budget
    tokens: Tokens = field(default_factory=Tokens)
    ends: Ends = field(default_factory=Ends)
    notes: list[str] = field(default_factory=list)
    # The pass's row in dreamd_runs: the diary's lines name it (None outside a pass).
    run_id: int | None = None
    # The vector epoch when the pass began; a forget (or a session changing owner) bumps
    # it, and then nothing prepared before may be saved.
    epoch: str | None = None
    # The newest turn when the pass sensed its backlog: jobs work up to it, and turns the
    # app writes meanwhile are the next pass's, so a busy app cannot starve later jobs.
    # None outside a pass: the newest turn when a job starts.
    horizon: int | None = None
    # The users this pass consolidates (a worker's leased users); None: every user.
    users: tuple[str, ...] | None = None
    # A worker's pass: which jobs are due, decided once on every user's backlog.
    due: dict[str, Any] | None = None
    # (job, item) that failed in this pass: not asked again before the next one.
    failed_now: set[tuple[str, str]] = field(default_factory=set)

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

    def stopped(self) -> bool:
        return self.halted is not None or self.ending or self.budget.exhausted()

    def still_current(self, conn: Conn) -> bool:
        """Inside a write: whether memory was not forgotten since the pass began. Once it
        was, the pass saves nothing more and stops; the next one starts afresh."""
        if get_state(conn, "vector_epoch", "0") != self.epoch:
            self.ends.invalidated = True
        return not self.invalidated

    def abandon(self, calls: int, log: Logger) -> None:
        with self.ends.lock:
            self.ends.abandoned += calls
        self.notes.append(f"stopping: {calls} backend calls still in flight were abandoned "
                          f"after the stop grace; nothing they return is written")
        log.warning("calls_abandoned", calls=calls)

    def halt(self, error: BaseException, log: Logger) -> None:
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
            log.error(event, reason=type(error).__name__, detail=str(error))

    @property
    def stopped_work(self) -> str:
        """What the halt stopped, in words: "embedding stopped" or "LLM work stopped"."""
        if getattr(self.halted, "part", "") == "embedder":
            return "embedding stopped"
        return "LLM work stopped"

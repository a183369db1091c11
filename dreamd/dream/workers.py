"""A worker's share of a pass on a shared store: claim users with work, consolidate them,
release them, until no user with work is left unclaimed (dreamd.store.leases)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import datetime

from dreamd.config import Config
from dreamd.errors import DreamdError
from dreamd.ids import agent_key, user_key
from dreamd.logger import Logger, silent
from dreamd.store import leases
from dreamd.store.failure import engine_errors
from dreamd.store.interface import Store
from dreamd.text.keys import space


def store_faults() -> tuple[type[Exception], ...]:
    """What a worker's store may raise when its server is away."""
    return (DreamdError, *engine_errors())


class Claims:
    """One worker's leases on a shared store, kept alive by a heartbeat thread on a
    connection of its own while the running pass works on them, and no longer: a pass
    that ends, however it ends, leaves its leases to be handed back or to run out."""

    def __init__(self, store: Store, config: Config, log: Logger | None = None,
                 worker: str | None = None) -> None:
        self.store = store
        self.config = config
        self.log = log or silent()
        # A pass in a process of its own claims as its daemon's worker, and beats for the
        # leases it holds itself: they are renewed while that process works on them, and
        # no longer (its daemon's beats renew none of them).
        self.worker = worker or leases.new_worker_id()
        self.seconds = config.workers.lease_seconds
        self._stop = threading.Event()
        self._beat: Store | None = None
        self._thread: threading.Thread | None = None
        # Told, on every beat, how many live workers share this machine (the local
        # model divides the cores between them).
        self.on_neighbours: Callable[[int], None] = lambda workers: None
        self.here = 1  # live workers on this machine at the last beat
        self.since: datetime | None = None  # the server's clock when the pass began
        # The lease keys the running pass works on: the only ones the heartbeat extends.
        # Changed by the pass's thread only, each time a new set (the heartbeat reads it
        # whole, without a lock).
        self._held: frozenset[str] = frozenset()
        # Keys a pass could not hand back (the server was away): handed back when the next
        # pass begins, if they have not run out by then; never extended.
        self._unreleased: set[str] = set()
        self._told = True  # the beats' failures logged (see start)

    def start(self, told: bool = True) -> None:
        """Beat from now on; `told`: say when the beats fail and come back (the daemon
        does; a pass in a process of its own beats beside it, silently, and its pass says
        when the store is away)."""
        self._told = told
        self._beat = leases.own_connection(self.store, self.config.store.busy_timeout_ms)
        self._heartbeat()
        self._thread = threading.Thread(target=self._run, name="dreamd-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        assert self._beat is not None
        beat = leases.heartbeat(self._beat, self.worker, self.seconds, sorted(self._held))
        self.here = beat.here
        self.on_neighbours(beat.here)

    def _run(self) -> None:
        # The first beat again soon: workers started together see each other by then.
        wait, failing = min(1.0, self.seconds / 3), False
        while not self._stop.wait(wait):
            wait = self.seconds / 3
            try:
                self._heartbeat()
            except Exception as exc:  # the next beat may get through; leases expire if not
                if not failing and self._told:  # once while the server is away
                    self.log.warning("heartbeat_failed", error=str(exc)[:200],
                                     detail=f"tried again every {wait:g} s")
                failing = True
                continue
            if failing and self._told:
                self.log.info("heartbeat_resumed")
            failing = False

    def stop(self, leave: bool = True) -> None:
        """No more beats; and, with `leave`, the worker's leases and row go (a pass in a
        process of its own stops only its beats: its daemon is the worker)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._beat is not None and not leave:
            self._beat.close()
        elif self._beat is not None:
            try:
                leases.leave(self._beat, self.worker)
            except store_faults() as exc:  # the server is away
                self.log.warning("leases_not_released", error=str(exc)[:200],
                                 detail=f"they expire within {self.seconds:g} s")
            finally:
                self._beat.close()

    def waiting(self, embed_model: str) -> list[str]:
        """The users with work when the pass began (its horizon fixes what work it does);
        first, the leases an earlier pass could not hand back go back."""
        from dreamd.store.pending import users_with_work  # the pass's: it reads vectors

        if self._unreleased:
            leases.release(self.store, self.worker, sorted(self._unreleased))
            self._unreleased.clear()
        self.since = leases.server_now(self.store)
        with self.store.read() as conn:
            return users_with_work(conn, space(embed_model))

    def users(self, waiting: list[str]) -> tuple[str, ...]:
        """Claim up to `workers.batch_users` of `waiting` that nobody else holds and no
        other worker has done since this pass began (each user is visited once per pass
        of the fleet, not once per worker)."""
        keys = leases.claim(self.store, self.worker, [user_key(u) for u in waiting],
                            self.config.workers.batch_users, self.seconds, self.since)
        self._held |= set(keys)
        claimed = tuple(k.removeprefix("user:") for k in keys)
        for user in claimed:  # after the claim committed: the logged hold is inside the real
            self.log.info("lease_claimed", user=user, worker=self.worker, at=time.time())
        return claimed

    def release(self, users: tuple[str, ...]) -> None:
        for user in users:  # before the release commits, for the same reason
            self.log.info("lease_released", user=user, worker=self.worker, at=time.time())
        self._let_go([user_key(u) for u in users])

    def _let_go(self, keys: list[str]) -> None:
        """No longer extended, then handed back; when the server cannot be reached they
        are handed back by the next pass (raises: this pass cannot go on either)."""
        self._held -= set(keys)
        try:
            leases.release(self.store, self.worker, keys)
        except store_faults() as exc:
            self._unreleased.update(keys)
            self.log.warning("leases_not_released", leases=len(keys), error=str(exc)[:200],
                             detail="no longer extended: handed back by the next pass, "
                             f"or they run out within {self.seconds:g} s")
            raise

    def end_pass(self) -> None:
        """The pass is over, however it ended: the leases it still holds are no longer
        extended, and are handed back if the server answers."""
        if self._held:
            with contextlib.suppress(*store_faults()):  # logged; handed back later
                self._let_go(sorted(self._held))

    def others_consolidating(self) -> int:
        """Users other workers hold now: their gists are still to come."""
        return leases.others_hold(self.store, self.worker, user_key(""))

    def agent(self) -> bool:
        keys = leases.claim(self.store, self.worker, [agent_key(self.config.agent.id)], 1,
                            self.seconds)
        self._held |= set(keys)
        return bool(keys)

    def release_agent(self) -> None:
        self._let_go([agent_key(self.config.agent.id)])

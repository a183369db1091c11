"""Running dreamd: one pass (--force), or passes on a schedule until a signal.

Signal handlers only set flags; the main thread acts on them. One pass runs at a time,
in the scheduler's single worker thread, and checks the stop flag between items.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from dreamd import config as cfg
from dreamd.dream.workers import Claims
from dreamd.errors import EXIT_JOB_FAILED, EXIT_OK, DreamdError, StoreError
from dreamd.logger import Logger
from dreamd.models import PassResult
from dreamd.runtime.health import Health, WatchedEmbedder
from dreamd.runtime.lock import InstanceLock
from dreamd.runtime.log import LoggedProgress
from dreamd.runtime.notify import Notifier
from dreamd.runtime.outage import Outage, record_return
from dreamd.runtime.pass_process import PassProcess, PassRequest
from dreamd.runtime.schedule import in_quiet_hours, next_delay, retry_delay
from dreamd.store.failure import engine_errors, store_away
from dreamd.store.leases import end_orphaned_runs
from dreamd.store.opening import check_sqlite, ensure_directory, open_brief, open_store
from dreamd.store.runs import end_crashed_runs, end_stopped_runs
from dreamd.store.state import set_state
from dreamd.store.turns import newest_turn_id


class Flags:
    """What the signal handlers set. A second SIGTERM/SIGINT exits at once: SQLite's
    atomic commit means an interrupted transaction simply never happened. After the
    first, `on_grace_over` runs once `grace` seconds have passed without an exit."""

    def __init__(self, grace: float = 8.0, on_grace_over: Any = None) -> None:
        self.stop = threading.Event()
        self.reload = threading.Event()
        self.wake = threading.Event()
        self.grace = grace
        self.on_grace_over = on_grace_over

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGHUP, self._reload)

    def _stop(self, signum: int, _frame: Any) -> None:
        if self.stop.is_set():
            os._exit(128 + signum)
        self.stop.set()
        self.wake.set()
        if self.on_grace_over is not None:
            timer = threading.Timer(self.grace, self.on_grace_over)
            timer.daemon = True
            timer.start()

    def _reload(self, _signum: int, _frame: Any) -> None:
        self.reload.set()
        self.wake.set()


def exit_now(code: int) -> None:
    """Leave without waiting for threads still blocked in a backend call (Python would
    join them at exit, for as long as their timeouts run)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def lingering_threads() -> bool:
    """Whether a non-daemon thread besides this one is still alive (an abandoned call)."""
    return any(t.is_alive() and not t.daemon and t is not threading.current_thread()
               for t in threading.enumerate())


def mark_interrupted(config: cfg.Config, pid: int, worker: str | None = None) -> None:
    """From a connection of its own: this process's unfinished pass ended by a stop."""
    store = open_brief(config)
    try:
        with store.write() as conn:
            end_stopped_runs(conn, pid, datetime.now(UTC).isoformat(), worker)
    finally:
        store.close()


def status_line(result: PassResult | None) -> str:
    if result is None:
        return "started; no pass yet"
    d = result.drives_after
    return (f"last pass {result.outcome}; continuity {d.continuity:.2f} coherence "
            f"{d.coherence:.2f} curiosity {d.curiosity:.2f} stability {d.stability:.2f}")


class Runner:
    """The open memory file, its lock and backends, and the flags: shared by both modes."""

    def __init__(self, config: cfg.Config, log: Logger, notifier: Notifier,
                 create: bool = False, apart: bool = False) -> None:
        self.config = config
        self.create = create
        # Each pass in a process of its own (`pass_process`): this one loads no backend.
        self.apart = apart
        self.passing: PassProcess | None = None
        self.progress = LoggedProgress(log)  # long jobs log a line every 30 s
        self.log = log
        self.notifier = notifier
        self.flags = Flags(config.pass_.stop_grace_seconds, self.grace_over)
        self.health = Health()
        # One dreamd per SQLite file; on PostgreSQL any number share the work.
        self.lock = InstanceLock(config.db_path) if config.store_url is None else None
        self.store: Any = None
        self.claims: Claims | None = None  # a worker's leases on a shared store
        self.last: PassResult | None = None
        self.backends: tuple[object, ...] = ()

    def start(self) -> None:
        self.flags.install()
        # The lock comes first: a second dreamd must not even migrate a file in use.
        if self.lock is None:
            self.store = open_store(self.config)
        else:
            path = self.config.db_path
            if not self.create and not path.exists():
                raise StoreError(f"{path} does not exist: point --db at the chat app's "
                                 "memory file, or pass --create to start a new one")
            ensure_directory(self.config)
            self.lock.acquire(create=True)
            try:
                self.store = open_store(self.config)
            except BaseException:
                self.lock.release()
                raise
            check_sqlite(self.log)  # once per start, not on every command
        if self.store.shared:
            self.claims = Claims(self.store, self.config, self.log)
            self.claims.start()
            crashed = end_orphaned_runs(self.store, 2 * self.config.workers.lease_seconds)
        else:
            with self.store.write() as conn:
                crashed = end_crashed_runs(conn)
        if crashed:
            self.log.warning("crashed_runs_closed", runs=crashed,
                             detail="passes whose process ended mid-pass (kill -9, power loss)")
        self.set_backends(self.config)

    def set_backends(self, config: cfg.Config) -> None:
        if self.apart:  # each pass's process makes its own; what they load is checked
            from dreamd.dream.factory import check_backends

            check_backends(config)
            return
        from dreamd.backends.local import LocalEmbedder
        from dreamd.dream.factory import make_backends

        embedder, self.completer = make_backends(config, self.flags.stop)
        # Closed when the runner closes. Those a reload replaces are left to the collector:
        # a pass may still be using them.
        self.backends = (embedder, self.completer)
        if self.claims is not None and isinstance(embedder, LocalEmbedder):
            # Workers on one machine share its cores (embed.threads 0 only).
            self.claims.on_neighbours = embedder.share
            embedder.share(self.claims.here)
        deadline = config.completer.call_deadline_seconds + config.completer.connect_timeout_seconds
        self.embedder = WatchedEmbedder(embedder, self.health, deadline)

    def grace_over(self) -> None:
        """The stop grace passed and the pass is still inside a backend call (the pool
        abandons its calls sooner; this catches one made on the pass thread itself). Go
        now, as a kill would, but saying so: SQLite's atomic commit keeps the file whole,
        and no transaction is ever open across a backend call."""
        self.log.warning("stop_grace_over", grace=self.flags.grace,
                         detail="a backend call was still in flight; exiting without it")
        self.notifier.stopping()
        passing = self.passing
        if passing is not None:
            passing.signal(signal.SIGKILL)
        with contextlib.suppress(Exception):
            mark_interrupted(self.config, passing.pid if passing and passing.pid else os.getpid(),
                             self.claims.worker if self.claims else None)
        exit_now(EXIT_OK)

    def close(self) -> None:
        if self.claims is not None:
            self.claims.stop()
        if self.store is not None:
            self.store.close()
        if self.lock is not None:
            self.lock.release()
        if self.backends:
            from dreamd.dream.factory import release

            release(*self.backends)

    def should_stop(self) -> bool:
        self.health.beat()  # called between items: the pass is making progress
        return self.flags.stop.is_set()

    def one_pass(self, trigger: str, force: bool, progress: Any = None) -> PassResult:
        with self.health.working():
            if self.apart:
                result = self.pass_apart(trigger, force)
            else:
                from dreamd.dream.cycle import run_pass

                progress = progress or self.progress
                kwargs = {"progress": progress} if progress else {}
                result = run_pass(self.store, self.config, self.embedder, self.completer,
                                  trigger=trigger, force=force, stop=self.should_stop,
                                  log=self.log, claims=self.claims, **kwargs)
        self.last = result
        self.notifier.status(status_line(result))
        return result


    def pass_apart(self, trigger: str, force: bool) -> PassResult:
        """The pass in a process of its own, which holds the file's lock with this one
        (the descriptor is passed on: no other dreamd can start while either lives)."""
        request = PassRequest(self.config, trigger, force, os.getpid(),
                              self.claims.worker if self.claims else None,
                              self.claims.here if self.claims else 1)
        self.passing = PassProcess(request, self.health, self.flags.stop,
                                   [self.lock.fd] if self.lock and self.lock.fd else [])
        try:
            return self.passing.run()
        finally:
            self.passing = None


def run_force(config: cfg.Config, log: Logger, progress: Any = None, create: bool = False
              ) -> int:
    runner = Runner(config, log, Notifier(), create)
    runner.start()
    try:
        result = runner.one_pass("force", True, progress)
    finally:
        runner.close()
    code = EXIT_JOB_FAILED if result.failed else EXIT_OK
    if runner.flags.stop.is_set():
        log.info("stopped", reason="signal")
        code = EXIT_OK
        if lingering_threads():
            exit_now(code)  # abandoned calls: their threads are not waited for
    return code


class Daemon:
    """Passes on an APScheduler 3 schedule until SIGTERM/SIGINT; SIGHUP reloads config."""

    def __init__(self, config: cfg.Config, log: Logger, *, config_path: str | None,
                 db_flag: str | None, fixed_interval: float | None,
                 notifier: Notifier | None = None, create: bool = False) -> None:
        self.config_path, self.db_flag, self.fixed = config_path, db_flag, fixed_interval
        self.runner = Runner(self.effective(config), log, notifier or Notifier(), create,
                             apart=config.pass_.own_process)
        self.log = log
        self._quiet_logged = False
        self.last_end = datetime.now().astimezone()
        self.outage: Outage | None = None  # the store away, since a pass found it so

    def effective(self, config: cfg.Config) -> cfg.Config:
        """--loop SECONDS fixes the delay between passes."""
        if self.fixed is None:
            return config
        schedule = dataclasses.replace(config.schedule, min_interval_seconds=self.fixed,
                                       max_interval_seconds=self.fixed)
        return dataclasses.replace(config, schedule=schedule)

    @property
    def config(self) -> cfg.Config:
        return self.runner.config

    def run(self) -> int:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        # APScheduler logs through the stdlib; our own lines say what matters, in JSON.
        logging.getLogger("apscheduler").addHandler(logging.NullHandler())
        logging.getLogger("apscheduler").propagate = False
        self.runner.start()
        self.scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(1)})
        self.schedule_jobs(first_run=True)
        self.scheduler.start()
        notifier = self.runner.notifier
        notifier.ready(status_line(None))
        self.log.info("daemon_started", pid=os.getpid(), db=self.config.where,
                      min_interval=self.config.schedule.min_interval_seconds,
                      max_interval=self.config.schedule.max_interval_seconds)
        watchdog = self.start_watchdog()
        look_every = self.start_listening()
        try:
            while not self.runner.flags.stop.is_set():
                self.runner.flags.wake.wait(look_every)
                self.runner.flags.wake.clear()
                if self.runner.flags.reload.is_set():
                    self.runner.flags.reload.clear()
                    self.reload()
                self.watch_turns()
                if look_every > 1.0:  # woken by the app's NOTIFY: at most a look a second
                    self.runner.flags.stop.wait(1.0)
            notifier.stopping()
            self.log.info("stopping", reason="signal")
            self.scheduler.shutdown(wait=True)  # the running pass stops between items
        finally:
            if watchdog is not None:
                watchdog.set()
            self.runner.close()
        self.log.info("stopped", reason="signal")
        if lingering_threads():
            exit_now(EXIT_OK)  # abandoned calls: their threads are not waited for
        return EXIT_OK

    def start_listening(self) -> float:
        """On PostgreSQL, new turns wake the daemon through LISTEN/NOTIFY, and it looks
        for them itself only every 30 s; on SQLite it looks every second."""
        listening = self.runner.store.listen(
            self.runner.flags.wake, self.runner.flags.stop, self.listening_changed)
        return 30.0 if listening else 1.0

    def listening_changed(self, error: str | None) -> None:
        if error is None:
            self.log.info("listen_resumed", detail="new turns wake the daemon again")
        else:
            self.log.warning("listen_failed", error=error, detail="set up again once the "
                             "server answers; looking every 30 s meanwhile")

    def watch_turns(self) -> None:
        """New turns since the last pass sensed its backlog bring the next pass forward
        to `wake_on_turns_seconds` after the last one ended. One indexed read on a
        read-only connection of the main thread's own (~0.1 ms a look)."""
        wait = self.config.schedule.wake_on_turns_seconds
        last = self.runner.last
        if self.fixed is not None or not wait or last is None or self.runner.health.running:
            return
        try:
            # A connection of its own for each look: one kept open across looks was seen
            # to keep a stale view of the WAL once another process's connection closed.
            watcher = open_brief(self.config, read_only=True)
            try:
                with watcher.read() as conn:
                    newest = newest_turn_id(conn)
            finally:
                watcher.close()
        except DreamdError:
            return  # the schedule still runs; the next look may work
        except engine_errors():
            return
        if newest <= last.stats_before.max_exchange_id:
            return
        wake = self.last_end + timedelta(seconds=wait)
        job = self.scheduler.get_job("pass")
        if job is not None and job.next_run_time is not None and job.next_run_time > wake:
            now = datetime.now(self.scheduler.timezone)
            self.scheduler.modify_job("pass", next_run_time=max(wake, now))
            self.log.info("new_turns", turns=newest - last.stats_before.max_exchange_id,
                          next_pass_in=round(max(0.0, (wake - now).total_seconds()), 1))

    def schedule_jobs(self, first_run: bool = False) -> None:
        s = self.config.schedule
        now = datetime.now(self.scheduler.timezone)
        self.scheduler.add_job(
            self.scheduled_pass, "interval", seconds=s.max_interval_seconds, id="pass",
            replace_existing=True, coalesce=True, max_instances=1,
            misfire_grace_time=int(max(1, s.max_interval_seconds)),
            next_run_time=now if first_run else now + timedelta(seconds=s.min_interval_seconds),
        )
        if s.deep_pass_cron:
            from apscheduler.triggers.cron import CronTrigger

            self.scheduler.add_job(
                self.deep_pass, CronTrigger.from_crontab(s.deep_pass_cron), id="deep",
                replace_existing=True, coalesce=True, max_instances=1,
                misfire_grace_time=3600,
            )
        elif self.scheduler.get_job("deep"):
            self.scheduler.remove_job("deep")

    def scheduled_pass(self) -> None:
        if self.runner.flags.stop.is_set():
            return
        if in_quiet_hours(datetime.now().astimezone(), self.config.schedule.quiet_hours):
            if not self._quiet_logged:
                self.log.info("quiet_hours", window=self.config.schedule.quiet_hours)
                self._quiet_logged = True
            return
        self._quiet_logged = False
        self.guarded_pass("schedule", force=False)

    def deep_pass(self) -> None:
        if not self.runner.flags.stop.is_set():
            self.guarded_pass("deep", force=True)

    def guarded_pass(self, trigger: str, force: bool) -> None:
        """A pass that cannot kill the daemon; then choose when to wake next."""
        stability = 0.0
        try:
            self.store_back()
            stability = self.runner.one_pass(trigger, force).drives_after.stability
        except Exception as exc:  # the daemon lives on
            self.pass_failed(exc)
        if self.runner.flags.stop.is_set():
            return
        delay = (retry_delay(self.outage.tries, stability, self.config.schedule)
                 if self.outage else next_delay(stability, self.config.schedule))
        self.last_end = datetime.now(self.scheduler.timezone)
        wake = self.last_end + timedelta(seconds=delay)
        self.scheduler.modify_job("pass", next_run_time=wake)
        # For `dreamd status`; never worth a failure. A write the app's lock holds up is
        # stuck work like a pass's own, so the watchdog watches it too.
        with (self.runner.health.working(), contextlib.suppress(Exception),
              self.runner.store.write() as conn):
            set_state(conn, "next_pass_at", wake.astimezone(UTC).isoformat())

    def pass_failed(self, exc: Exception) -> None:
        """A broken file or a bug: logged, retried at the soonest. A store whose server
        went away: an outage begins or goes on, and the next try comes in seconds."""
        if not store_away(exc):
            self.log.error("pass_error", error=f"{type(exc).__name__}: {exc}"[:300])
            return
        self.outage = self.outage.again() if self.outage else Outage(datetime.now(UTC))
        self.log.warning("store_away", error=str(exc)[:300],
                         since=self.outage.since.isoformat(), tries=self.outage.tries)

    def store_back(self) -> None:
        """Before a pass, after the store was away: record its return (raises while it
        is still away)."""
        if self.outage is None:
            return
        with self.runner.health.working():
            worker = self.runner.claims.worker if self.runner.claims else None
            seconds = record_return(self.runner.store, self.outage, datetime.now(UTC),
                                    os.getpid(), worker)
        self.log.info("store_back", away_seconds=round(seconds, 1), tries=self.outage.tries)
        self.outage = None

    def reload(self) -> None:
        try:
            new = cfg.load(self.config_path, db=self.db_flag)
        except DreamdError as exc:
            self.log.error("config_reload_failed", error=str(exc), kept="previous config")
            return
        new = self.effective(new)
        if new.where != self.config.where:
            self.log.warning("config_reload_db_ignored", db=new.where,
                             detail="a new memory store needs a restart")
            new = dataclasses.replace(new, db=self.config.db, store=dataclasses.replace(
                new.store, url=self.config.store.url, schema=self.config.store.schema))
        changed = sorted(
            f"{f.name}" for f in dataclasses.fields(new)
            if getattr(new, f.name) != getattr(self.config, f.name)
        )
        if new.embed != self.config.embed or new.completer != self.config.completer:
            self.runner.set_backends(new)
        self.runner.config = new
        self.schedule_jobs()
        self.log.info("config_reloaded", changed=changed)

    def start_watchdog(self) -> threading.Event | None:
        """Ping at a quarter of WATCHDOG_USEC while healthy; fall silent when a pass is
        stuck (no progress for half the interval), so systemd restarts us."""
        seconds = self.runner.notifier.watchdog_seconds
        if not seconds:
            return None
        done = threading.Event()

        def loop() -> None:
            while not done.wait(seconds / 4):
                if self.runner.health.healthy(seconds / 2):
                    self.runner.notifier.watchdog()

        threading.Thread(target=loop, name="watchdog", daemon=True).start()
        return done

"""A pass in a process of its own, so that what a pass loads goes back to the system.

The daemon spends most of its life asleep between passes. A pass loads the embedding
model and its runtime, builds tables and arenas that the allocator keeps once freed; run
in the daemon's own process, all of it stayed resident until the next pass, hours later.
So the daemon starts `python -m dreamd.runtime.pass_process` for each pass, hands it the
pass's request on its stdin, and reads what it reports on a pipe: beats and embedding
deadlines for the watchdog, then the pass's result or its error. The daemon itself never
imports numpy, the model's runtime or the tokenizer.

Signals: the daemon forwards its first SIGTERM/SIGINT as SIGTERM, and the pass finishes or
cleanly abandons its item. The process ignores SIGINT and SIGHUP (a terminal's Ctrl-C or
hang-up reaches the whole process group: the daemon decides) and takes any SIGTERM as that
first one (systemd's KillMode=control-group sends it one of its own); "now" is SIGKILL,
from the daemon, or from the kernel when the daemon dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from dreamd import config as cfg
from dreamd.models import PassResult

if TYPE_CHECKING:
    from dreamd.runtime.health import Health

# Loading the model and the pass's modules counts as progress for the watchdog until this
# many seconds have passed (about half a second on a quiet 2-core box).
START_SECONDS = 60.0
# At most one beat a this often goes up the pipe: the pass calls `should_stop` between
# items, thousands of times a second in some jobs.
BEAT_EVERY = 0.2
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class PassRequest:
    """What one pass needs from the daemon: its config, why it runs, and on a shared store
    the worker it runs as (the daemon keeps that worker's leases alive)."""

    config: cfg.Config
    trigger: str
    force: bool
    parent: int
    worker: str | None = None
    neighbours: int = 1


class PassProcessError(Exception):
    """The pass's process ended without a result (killed, out of memory, a crash)."""


class PassProcess:
    """The daemon's side: start the pass's process, relay its reports, return its result."""

    def __init__(self, request: PassRequest, health: Health, stop: threading.Event,
                 keep_fds: Iterable[int] = ()) -> None:
        self.request, self.health, self.stop = request, health, stop
        self.keep_fds = tuple(keep_fds)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def run(self) -> PassResult:
        reader, writer = os.pipe()
        # The watchdog and notify socket are the daemon's: the pass must not answer them.
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
        self.health.busy_until = time.monotonic() + START_SECONDS
        try:
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "dreamd.runtime.pass_process", str(writer)],
                    stdin=subprocess.PIPE, pass_fds=(writer, *self.keep_fds), env=env)
            finally:
                os.close(writer)
            with Connection(reader, writable=False) as pipe:
                self._send_request()
                outcome = self._relay(pipe)
            code = self.proc.wait()
        finally:
            self.health.busy_until = 0.0
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is None:
            self.mark_crashed()
            raise PassProcessError(f"the pass's process (pid {self.proc.pid}) ended "
                                   f"{ended_by(code)} before it finished")
        result: PassResult = outcome
        return result

    def mark_crashed(self) -> None:
        """Its run, left running, is over: say so (the daemon lives on to the next)."""
        from dreamd.store.opening import open_brief
        from dreamd.store.runs import end_stopped_runs

        assert self.proc is not None
        with contextlib.suppress(Exception):  # the next start marks it crashed anyway
            store = open_brief(self.request.config)
            try:
                with store.write() as conn:
                    end_stopped_runs(conn, self.proc.pid, datetime.now(UTC).isoformat(),
                                     self.request.worker, outcome="crashed",
                                     error="the pass's process ended before the pass "
                                     "finished")
            finally:
                store.close()

    def _send_request(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(pickle.dumps(self.request))
            self.proc.stdin.close()
        except BrokenPipeError:  # it ended at once; its exit status says why
            pass

    def _relay(self, pipe: Connection) -> Any:
        """Reports until the process closes the pipe (it exits); SIGTERM forwarded once."""
        outcome: Any = None
        forwarded = False
        while True:
            if self.stop.is_set() and not forwarded:
                self.signal(signal.SIGTERM)
                forwarded = True
            if not pipe.poll(0.1):
                continue
            try:
                kind, value = pipe.recv()
            except (EOFError, OSError):
                return outcome
            if kind == "beat":
                self.health.beat()
            elif kind == "busy":  # a deadline on CLOCK_MONOTONIC, one clock for both
                self.health.busy_until = value
                self.health.beat()
            else:
                outcome = value

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)


def ended_by(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        return f"by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"with exit code {code}"


class Beats:
    """The pass's side of the watchdog: `Health` as the daemon's `WatchedEmbedder` and
    pass use it, its beats and deadlines sent up the pipe."""

    def __init__(self, pipe: Connection) -> None:
        self.pipe = pipe
        self.last_sent = 0.0
        self.lock = threading.Lock()  # jobs side by side beat from their own threads

    def send(self, kind: str, value: Any) -> None:
        with self.lock:
            self.pipe.send((kind, value))

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.last_sent >= BEAT_EVERY:
            self.last_sent = now
            self.send("beat", now)

    @property
    def busy_until(self) -> float:
        return 0.0

    @busy_until.setter
    def busy_until(self, value: float) -> None:
        self.send("busy", value)


def die_with(parent: int) -> None:
    """SIGKILL when the daemon dies, however it dies: a pass never outlives it."""
    with contextlib.suppress(Exception):  # not Linux, or a seccomp filter refuses it
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # it died before we asked
        os._exit(1)


def main() -> None:
    """The pass's process: one pass as the request says, its result up the pipe, exit."""
    pipe = Connection(int(sys.argv[1]), readable=False)
    try:
        request: PassRequest = pickle.load(sys.stdin.buffer)
    except Exception:  # not started by a daemon: nothing to do, nobody to tell
        os._exit(2)
    die_with(request.parent)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    beats = Beats(pipe)
    try:
        result: Any = run_one(request, beats, stop)
    except Exception as exc:
        result = portable(exc)
    try:
        beats.send("result", result)
    except Exception as exc:  # a result that cannot be sent: the daemon logs why
        beats.send("result", RuntimeError(f"the pass's result could not be sent: {exc}"))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)  # abandoned calls' threads are not waited for


def portable(exc: Exception) -> Exception:
    """The exception itself if it survives the pipe, else its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def run_one(request: PassRequest, beats: Beats, stop: threading.Event) -> PassResult:
    from dreamd.dream.cycle import run_pass
    from dreamd.dream.factory import make_backends, release
    from dreamd.dream.workers import Claims
    from dreamd.runtime import log as logging_
    from dreamd.runtime.health import WatchedEmbedder
    from dreamd.runtime.heap import large_blocks_unmapped
    from dreamd.runtime.priority import one_blas_thread
    from dreamd.store.opening import open_store

    config = request.config
    logging_.configure(config.log.level, config.log.format, stream=sys.stdout)
    log = logging_.get_logger()
    log.debug("blas", threads=one_blas_thread())
    log.debug("heap", large_blocks_unmapped=large_blocks_unmapped())
    embedder, completer = make_backends(config, stop)
    # Loaded: from here on the pass beats, and a pass stuck opening the store (behind the
    # app's write lock) is seen as stuck.
    beats.busy_until = 0.0
    try:
        store = open_store(config, create=False)
    except BaseException:
        release(embedder, completer)
        raise
    try:
        claims = None
        if request.worker is not None:
            claims = Claims(store, config, log, worker=request.worker)
            claims.start(told=False)  # beats for the leases this pass holds, while it works
            if config.embed.backend == "local":  # its module: only for the local model
                from dreamd.backends.local import LocalEmbedder

                if isinstance(embedder, LocalEmbedder):
                    embedder.share(request.neighbours)
        deadline = (config.completer.call_deadline_seconds
                    + config.completer.connect_timeout_seconds)
        watched = WatchedEmbedder(embedder, beats, deadline)

        def should_stop() -> bool:
            beats.beat()
            return stop.is_set()

        return run_pass(store, config, watched, completer, trigger=request.trigger,
                        force=request.force, stop=should_stop, log=log, claims=claims,
                        progress=logging_.LoggedProgress(log))
    finally:
        if claims is not None:
            claims.stop(leave=False)
        store.close()
        release(embedder, completer)


if __name__ == "__main__":
    main()

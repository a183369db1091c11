"""structlog, configured once at the edge: readable on a terminal, JSON lines elsewhere."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from dreamd.logger import Logger

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}
_SECRET_WORDS = ("key", "token", "secret", "password", "authorization")


def drop_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a field named like a secret reach a log line."""
    for name in list(event):
        if any(word in name.lower() for word in _SECRET_WORDS) and not name.startswith("tokens_"):
            event[name] = "[redacted]"
    return event


# Called before each log line is rendered: a progress line on the terminal clears itself
# so the log line is not printed over it.
_before_line: list[Callable[[], None]] = []


def before_each_line(hook: Callable[[], None]) -> Callable[[], None]:
    """Register `hook`; returns the function that unregisters it."""
    _before_line.append(hook)
    return lambda: _before_line.remove(hook) if hook in _before_line else None


def _run_hooks(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for hook in list(_before_line):
        hook()
    return event


class LoggedProgress:
    """Progress of long jobs as log events at a steady pace (daemon, --loop, journald):
    one `job_progress` line per job at most every `every` seconds."""

    def __init__(self, log: Logger, every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.every, self.clock = log, every, clock
        self.last: dict[str, float] = {}

    def __call__(self, job: str, done: int, total: int) -> None:
        now = self.clock()
        if job not in self.last:
            self.last[job] = now  # the clock starts with the job; short jobs stay quiet
            return
        if now - self.last[job] >= self.every:
            self.last[job] = now
            self.log.info("job_progress", job=job, done=done, total=total)


def configure(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    stream = stream or sys.stderr
    as_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            drop_secrets,
            _run_hooks,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        # One write per event, its newline included (print writes the two apart): the
        # daemon and its pass's process share the log, and another's event landed
        # between them, two events on one line.
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def get_logger(**bound: Any) -> Any:
    return structlog.get_logger("dreamd").bind(**bound)

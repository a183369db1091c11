"""What every command shares: the error boundary, config and file options, opening a
memory file, and the terminal's progress line."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, NoReturn

import click

from dreamd import config as cfg
from dreamd.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_PIPE_CLOSED, DreamdError
from dreamd.runtime import log as logging_
from dreamd.store.failure import engine_failure


def fail(message: str, exit_code: int = EXIT_BAD_INPUT) -> click.ClickException:
    """One line on stderr and its exit code (by default 2: bad input or config, nothing
    written)."""
    kind = type("Failure", (click.ClickException,), {"exit_code": exit_code})
    result: click.ClickException = kind(message)
    return result


def one_line(exc: click.UsageError) -> str:
    """A usage error as one line, with the command it concerns."""
    command = exc.ctx.command_path if exc.ctx is not None else "dreamd"
    return f"{exc.format_message()} (see '{command} --help')"


def pipe_closed() -> NoReturn:
    """The reader closed our stdout (`dreamd sessions | head`): its choice, not an error.
    Nothing more can reach it, and the interpreter's last flush must not try again, so
    stdout goes to /dev/null; the exit is the one a shell reports for a process ended by
    SIGPIPE (141), as `yes | head` ends."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(EXIT_PIPE_CLOSED)


class Dreamd(click.Group):
    """The one error boundary: whatever a command raises reaches the user as one line
    with its exit code, never as a traceback."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        finally:
            try:  # what is still buffered goes out now, where a closed pipe can be caught
                sys.stdout.flush()
            except BrokenPipeError:
                pipe_closed()

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise fail(one_line(exc)) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a subcommand's arguments
            raise fail(one_line(exc)) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            pipe_closed()
        except DreamdError as exc:
            raise fail(exc.for_operator(), exc.exit_code) from None
        except Exception as exc:
            failure = engine_failure(exc)
            if failure is not None:
                raise fail(str(failure), failure.exit_code) from None
            raise fail(f"internal error, please report it: {type(exc).__name__}: {exc}",
                          EXIT_INTERNAL) from None


def finite(value: float | None, name: str) -> float | None:
    """click's FloatRange lets nan through (every comparison with nan is false)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{name} must be a finite number of seconds, got {value}")
    return value


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def load_config(obj: dict[str, Any]) -> cfg.Config:
    return cfg.load(obj.get("config"), db=obj.get("db"))


class Progress:
    """A one-line progress display for long jobs, only on a terminal, at most 4 per second."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.last = 0.0
        self.shown = 0  # characters of the line on screen

    def __call__(self, job: str, done: int, total: int) -> None:
        if not self.enabled or time.monotonic() - self.last < 0.25:
            return
        self.last = time.monotonic()
        line = f"\r{job}: {done}/{total}   "
        self.stream.write(line)
        self.stream.flush()
        self.shown = len(line)

    def clear(self) -> None:
        """Wipe the line (before a log line is printed, and at the end); the next update
        draws it again."""
        if self.enabled and self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def _remember_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)[param.name or ""] = value


def file_options(command: Any) -> Any:
    """--db and --config after the subcommand too (`dreamd status --db F`)."""
    command = click.option("--config", "config", metavar="PATH", expose_value=False,
                           callback=_remember_option, is_eager=True,
                           help="A TOML config file (as before the subcommand).")(command)
    return click.option("--db", "db", metavar="PATH", expose_value=False,
                        callback=_remember_option, is_eager=True,
                        help="The memory file (as before the subcommand).")(command)


def read_existing(obj: dict[str, Any], build: Any, read_only: bool = True,
                  current: bool = True) -> Any:
    """Open an existing memory file (never creating one; read-only unless asked, and
    then, unless `current` is False, only one dreamd has set up), call build(store,
    config)."""
    from dreamd.store.opening import open_readonly, open_store

    config = load_config(obj)
    logging_.configure("warning", config.log.format)  # stderr: stdout is the report's
    store = open_readonly(config, current) if read_only else open_store(config, create=False)
    try:
        return build(store, config)
    finally:
        store.close()


def open_memory(obj: dict[str, Any]) -> Any:
    """The library API over an existing memory file, for recall and context."""
    from dreamd.memory.api import Memory

    config = load_config(obj)
    logging_.configure("warning", config.log.format)
    return Memory(config.store_url or config.db_path, config=config, read_only=True)

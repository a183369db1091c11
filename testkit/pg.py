"""A real PostgreSQL server for the tests: initdb into a temporary directory, a Unix
socket only, run as the `postgres` OS user when the tests run as root."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def bindir() -> Path | None:
    """Where initdb and postgres are: $PG_BINDIR, Debian's newest, or the PATH."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


class PgServer:
    """One server for a test session; each test gets a database of its own."""

    def __init__(self, port: int | None = None, inside: list[str] | None = None,
                 settings: str = "") -> None:
        """With `port`, the server listens on 127.0.0.1 there too (for traffic that must
        cross a network device, such as one with added latency); `inside` is a command
        prefix its tools run under (`ip netns exec NAME`); `settings`, more -c options."""
        self.port = port
        self.inside = inside or []
        self.settings = settings
        found = bindir()
        if found is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb) found; install "
                               "postgresql (Debian: apt install postgresql-15) or set "
                               "PG_BINDIR")
        self.bin = found
        self.root = Path(tempfile.mkdtemp(prefix="dreamd-pg-"))
        self.data = self.root / "data"
        self.user: str | None = None
        if os.geteuid() == 0:  # the server refuses to run as root
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._names = itertools.count(1)
        self._run("initdb", "-D", str(self.data), "-E", "UTF8", "--locale=C.UTF-8",
                  "-A", "trust", "-U", "postgres")
        # One role signs in with a password, to try wrong credentials against.
        hba = self.data / "pg_hba.conf"
        lines = hba.read_text()
        hba.write_text("local all carol scram-sha-256\n" + lines)
        self.up()

    def up(self) -> None:
        """Start the server (again), with the test options."""
        listen = f"-p {self.port} -c listen_addresses=127.0.0.1" if self.port else \
            "-c listen_addresses=''"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-o", f"-k {self.root} {listen} -c fsync=off "
                  "-c synchronous_commit=off -c full_page_writes=off "
                  f"-c max_connections=200 {self.settings}", "start")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        command = [*self.inside, *command]
        subprocess.run(command, check=True, capture_output=True, timeout=600)

    def url(self, database: str = "postgres", user: str = "postgres",
            password: str | None = None) -> str:
        auth = user if password is None else f"{user}:{password}"
        if self.port:
            return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{auth}@/{database}?host={self.root}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self, down_for: float = 0.0, mode: str = "fast") -> None:
        """Stop the server as an operator would (every connection is closed), leave it
        down for `down_for` seconds, and start it again with the same options."""
        self.down(mode)
        time.sleep(down_for)
        self.up()

    def down(self, mode: str = "fast") -> None:
        """Stop the server as an operator would: every connection is closed. `fast` rolls
        back what is running and shuts down cleanly; `immediate` quits at once, as a
        crash would, and the next start recovers from the log."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's: the whole running server."""
        main = int((self.data / "postmaster.pid").read_text().split()[0])
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                    and _parent(p) == main]
        return [main, *children]

    def pause(self) -> list[int]:
        """SIGSTOP the whole server, as a stalled machine or VM would stop it: its
        connections stay open and nothing answers. Returns the pids for `resume`."""
        pids = self.processes()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def resume(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def terminate(self, application: str) -> int:
        """pg_terminate_backend on every connection whose application_name starts with
        `application`; returns how many."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute("SELECT COUNT(pg_terminate_backend(pid)) FROM "
                               "pg_stat_activity WHERE application_name LIKE %s",
                               (application + "%",)).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _parent(proc: Path) -> int | None:
    """The parent pid of the process at /proc/PID, None once it is gone."""
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None

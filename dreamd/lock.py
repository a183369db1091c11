"""One dreamd per memory file: an flock on a file beside it.

The kernel drops an flock when its process dies, however it dies, so a kill -9'd holder
never leaves a stale lock behind; the pid written inside only names the holder.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dreamd.errors import DreamdError


class AlreadyRunning(DreamdError):
    """Another dreamd holds the memory file's lock."""


class InstanceLock:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.path = db_path.with_name(db_path.name + ".dreamd.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o660)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunning(
                f"another dreamd (pid {holder}) is already working on {self.db_path}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file itself may stay
            self._fd = None

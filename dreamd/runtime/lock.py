"""One dreamd per memory file, whatever path names it: an flock on the file itself.

The lock is on the file's identity (its inode), so a symlink or a hard link to a file a
daemon holds is refused like the file's own name. SQLite locks with fcntl() byte-range
locks, which are independent of flock() on Linux, so the two never meet. The kernel
drops an flock when its process dies, however it dies, so a kill -9'd holder never
leaves a stale lock behind.

One rule keeps it safe: the descriptor is opened before SQLite opens the file and closed
only after SQLite has closed it, because closing any descriptor of a file drops every
fcntl() lock the process holds on it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dreamd.errors import AlreadyRunning, StoreError


def holder_pid(fd: int) -> int | None:
    """The pid holding an flock on the file behind `fd`, from /proc/locks (Linux)."""
    return _flock_holder(os.fstat(fd))


def holder_of(path: Path) -> int | None:
    """The pid of the dreamd holding `path`, if any — without opening the file (a
    process that opens and closes it would drop its own SQLite locks on it)."""
    try:
        return _flock_holder(path.stat())
    except OSError:
        return None


def _flock_holder(st: os.stat_result) -> int | None:
    identity = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if "FLOCK" in fields and identity in fields:
                    return int(fields[fields.index(identity) - 1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class InstanceLock:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._fd: int | None = None

    def acquire(self, create: bool = False) -> None:
        """Lock the memory file (an empty one is made first when `create`: SQLite takes
        a zero-length file as a new database)."""
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.db_path, flags, 0o660)
        except FileNotFoundError:
            raise StoreError(f"{self.db_path} does not exist") from None
        except OSError as exc:
            raise StoreError(f"{self.db_path}: cannot open: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = holder_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "pid unknown"
            raise AlreadyRunning(
                f"another dreamd ({who}) is already working on {self.db_path}"
            ) from None
        self._fd = fd

    @property
    def fd(self) -> int | None:
        """The locked descriptor: a process given it holds the lock too, until it ends."""
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the flock
            self._fd = None

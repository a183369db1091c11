"""Background priority: dreamd is the one that can wait, so it asks the kernel to prefer
the chat app. Nice 10 and SCHED_BATCH for the CPU, the lowest best-effort I/O priority
for the disk: set on every thread the process has (numpy's BLAS pool starts at import)
before the model and the scheduler start theirs, which inherit it.

Not the idle classes (SCHED_IDLE, IOPRIO_CLASS_IDLE): dreamd holds SQLite's write lock
while it commits, and a writer that gets no CPU or disk while the app is busy would keep
the app waiting on that lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from typing import Any

NICE = 10
IOPRIO_CLASS_BE, IOPRIO_LOWEST, IOPRIO_WHO_PROCESS = 2, 7, 1
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314}


def background() -> dict[str, Any]:
    """Lower this process's priority where the system allows; what was set, and what was
    refused (no error: an unprivileged or non-Linux system simply keeps the default)."""
    done: dict[str, Any] = {}
    tasks = _threads()
    try:
        for tid in tasks:
            if os.getpriority(os.PRIO_PROCESS, tid) < NICE:
                os.setpriority(os.PRIO_PROCESS, tid, NICE)
        done["nice"] = NICE
    except (OSError, AttributeError) as exc:
        done["nice"] = f"unchanged ({exc})"
    try:
        for tid in tasks:
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
        done["cpu"] = "batch"
    except (OSError, AttributeError) as exc:
        done["cpu"] = f"unchanged ({exc})"
    done["io"] = _io_lowest(tasks)
    return done


def one_blas_thread() -> str:
    """numpy's BLAS on one thread, for a process that runs passes. OpenBLAS starts a
    thread for each core, and after every product they spin a while before they sleep:
    beside the embedded model, whose own threads take every core, that spinning took a
    core from the model: in the facts job, whose products (a batch of statements against
    the facts known) come between its model runs, a 10k-turn pass's runs took 5.3-5.5 s
    with it and 4.8 s without. The pass's products are small (a batch against a user's
    facts, a gist against its session): one thread does them."""
    import numpy  # noqa: F401  (its BLAS is limited once loaded)
    from threadpoolctl import threadpool_limits

    original = threadpool_limits(limits=1, user_api="blas").get_original_num_threads()
    threads = original.get("blas") if isinstance(original, dict) else original
    return f"one thread (of {threads})" if threads else "no BLAS found"


def _threads() -> list[int]:
    """This process's threads (Linux sets a priority per thread), or just this one."""
    try:
        return sorted(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return [0]


def _io_lowest(tasks: list[int]) -> str:
    number = SYS_IOPRIO_SET.get(platform.machine())
    library = ctypes.util.find_library("c")
    if number is None or library is None:
        return "unchanged (no ioprio_set here)"
    libc = ctypes.CDLL(library, use_errno=True)
    value = (IOPRIO_CLASS_BE << 13) | IOPRIO_LOWEST
    for tid in tasks:
        if libc.syscall(number, IOPRIO_WHO_PROCESS, tid, value) != 0:
            return f"unchanged ({os.strerror(ctypes.get_errno())})"
    return "best-effort 7"

"""The C heap of a process that runs passes: large blocks go back to the system when freed.

glibc's malloc serves a block of 128 KiB or more with its own mapping and unmaps it when
freed, but each time such a block is freed it raises that threshold to the block's size
(up to 32 MiB): after the first model runs, their working tensors come from the heap,
which keeps what it freed. The model's runs (a few MB each, many shapes) then left a pass
holding the most any run ever needed. A fixed threshold keeps the first rule.
"""

from __future__ import annotations

import contextlib
import ctypes

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD = 256 * 1024


def large_blocks_unmapped() -> bool:
    """Fix glibc's mmap threshold for this process; False where there is no glibc."""
    with contextlib.suppress(AttributeError, OSError):
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    return False

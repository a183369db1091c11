"""One call at a time on a Memory's one connection."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def serialized(method: Callable[..., T]) -> Callable[..., T]:
    """One call at a time on the instance's one connection: a Memory may be shared by a
    threaded chat server's threads (SQLite transactions on one connection cannot nest).
    The instance holds the lock as `_lock`."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return call

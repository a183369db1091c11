"""A store engine's exception as dreamd's own error: each engine words its own."""

from __future__ import annotations

from dreamd.errors import DreamdError
from dreamd.store.connect import sqlite_failure
from dreamd.store.postgres import engine_failure as pg_failure


def engine_failure(exc: BaseException) -> DreamdError | None:
    """`StoreBusy` for a lock held past its timeout, `StoreError` with the engine's words
    for anything else it raised, None when `exc` is not an engine's."""
    return sqlite_failure(exc) or pg_failure(exc)

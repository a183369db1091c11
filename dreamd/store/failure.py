"""A store engine's exception as dreamd's own error: each engine words its own."""

from __future__ import annotations

from dreamd.errors import DreamdError, StoreAway
from dreamd.store.postgres.store import engine_failure as pg_failure
from dreamd.store.postgres.store import server_away
from dreamd.store.sqlite.store import sqlite_failure


def engine_failure(exc: BaseException) -> DreamdError | None:
    """`StoreBusy` for a lock held past its timeout, `StoreAway` for a server that did not
    answer, `StoreError` with the engine's words for anything else it raised, None when
    `exc` is not an engine's."""
    return sqlite_failure(exc) or pg_failure(exc)


def store_away(exc: BaseException) -> bool:
    """Whether `exc` says the store's server was away (down, restarting, the connection
    lost): no fault of the work in hand, which a pass once it is back does again."""
    return isinstance(exc, StoreAway) or server_away(exc)  # a file is never away

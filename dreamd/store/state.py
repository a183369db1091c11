"""dreamd's own state: key/value rows, the sequence, vector blobs, the file's layout."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dreamd.store.interface import Conn, Store, dialect

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where a vector is read or written, not with this module: the daemon
# waiting between passes reads and writes state but never a vector, and stays small.


def to_blob(vector: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32)


def of_users(column: str, users: list[str] | None) -> tuple[str, tuple[str, ...]]:
    """(" AND column IN (?, …)", params) keeping the rows of `users`; None: everyone's."""
    if users is None:
        return "", ()
    return f" AND {column} IN ({','.join('?' * len(users))})", tuple(users)


def get_state(conn: Conn, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM dreamd_state WHERE key = ?", (key,)).fetchone()
    return row[0] if row else default


def set_state(conn: Conn, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO dreamd_state (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def move_state(conn: Conn, key: str, old: int, new: int) -> bool:
    """Inside a write: a numeric row of dreamd_state moved from `old` (0: the row may not
    exist yet) to `new`, in one statement that checks and moves it; False when it no
    longer held `old`."""
    if conn.execute("UPDATE dreamd_state SET value = ? WHERE key = ? AND value = ?",
                    (str(new), key, str(old))).rowcount:
        return True
    return old == 0 and conn.execute(
        "INSERT INTO dreamd_state (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
        (key, str(new))).rowcount == 1


def raise_state(conn: Conn, key: str, value: int) -> None:
    """Inside a write: a numeric row of dreamd_state moved up to `value`, never down
    (two writers moving one mark at once leave the higher)."""
    conn.execute(
        "INSERT INTO dreamd_state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
        "SET value = excluded.value WHERE CAST(dreamd_state.value AS BIGINT) < "
        "CAST(excluded.value AS BIGINT)", (key, str(value)))


def next_seq(conn: Conn) -> int:
    """A monotonic counter for derived rows; call inside a write transaction."""
    return dialect(conn).next_seq(conn)


@dataclass(frozen=True)
class Layout:
    """What the core tables of this file require (an adopted file may differ)."""

    summaries_embedding_required: bool
    eras_embedding_required: bool


def column_required(conn: Conn, table: str, column: str) -> bool:
    """Whether the table has this column and it is NOT NULL."""
    return dialect(conn).column_required(conn, table, column)


def read_layout(store: Store) -> Layout:
    with store.read() as conn:
        return Layout(column_required(conn, "summaries", "embedding"),
                      column_required(conn, "eras", "embedding"))


def core_embedding(required: bool) -> bytes | None:
    """What dreamd writes into a core table's embedding column.

    dreamd's vectors live in dreamd_vectors per model; the core column keeps the app's
    model. Where the prior-art layout makes it NOT NULL, an empty blob marks "no vector
    of the app's model" rather than a vector of another dimension.
    """
    return b"" if required else None


def iso_utc(text: str) -> str:
    """A timestamp as ISO-8601 UTC text, so that the tally's times compare as strings.

    The app's text may end in Z, use a space, or carry no zone (taken as UTC); text that
    is no timestamp at all is kept as it is.
    """
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def bump_vector_epoch(conn: Conn) -> None:
    """Tell in-process indexes (recall, gists) that rows they hold may be gone."""
    set_state(conn, "vector_epoch", str(int(get_state(conn, "vector_epoch", "0") or 0) + 1))

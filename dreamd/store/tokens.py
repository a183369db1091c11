"""The API tokens an operator handed out: their rows in dreamd_tokens (a slow hash of
each token, never the token), added, listed, revoked."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dreamd.store.interface import Conn


@dataclass(frozen=True)
class TokenRow:
    id: int
    name: str
    salt: str
    digest: str
    users: tuple[str, ...] | None  # None: every user
    scopes: tuple[str, ...]
    created_at: str
    revoked_at: str | None


COLUMNS = "id, name, salt, digest, users, scopes, created_at, revoked_at"


def _row(r: tuple[object, ...]) -> TokenRow:
    users = None if r[4] is None else tuple(json.loads(str(r[4])))
    return TokenRow(int(str(r[0])), str(r[1]), str(r[2]), str(r[3]), users,
                    tuple(str(r[5]).split(",")), str(r[6]),
                    None if r[7] is None else str(r[7]))


def add_token(conn: Conn, name: str, salt: str, digest: str,
              users: tuple[str, ...] | None, scopes: tuple[str, ...], at: str) -> int:
    row = conn.execute(
        "INSERT INTO dreamd_tokens (name, salt, digest, users, scopes, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (name, salt, digest, None if users is None else json.dumps(list(users)),
         ",".join(scopes), at)).fetchone()
    return int(row[0])


def token_row(conn: Conn, token_id: int) -> TokenRow | None:
    row = conn.execute(f"SELECT {COLUMNS} FROM dreamd_tokens WHERE id = ?",
                       (token_id,)).fetchone()
    return None if row is None else _row(tuple(row))


def token_rows(conn: Conn) -> list[TokenRow]:
    return [_row(tuple(r)) for r in conn.execute(
        f"SELECT {COLUMNS} FROM dreamd_tokens ORDER BY id")]


def live_tokens(conn: Conn) -> int:
    row = conn.execute("SELECT COUNT(*) FROM dreamd_tokens WHERE revoked_at IS NULL"
                       ).fetchone()
    return int(row[0])


def revoke_token(conn: Conn, token_id: int, at: str) -> bool:
    """Whether a live token of that id was revoked (now)."""
    done = conn.execute("UPDATE dreamd_tokens SET revoked_at = ? WHERE id = ? AND "
                        "revoked_at IS NULL", (at, token_id))
    return done.rowcount > 0

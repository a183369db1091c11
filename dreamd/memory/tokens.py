"""API tokens limited to some users and to reading, writing or erasing: issued (shown
once), checked, listed and revoked. A token reads `dmd_<id>_<secret>`; the store keeps a
slow hash of the secret (scrypt, from the standard library), so a copy of the store
hands out no token."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dreamd.errors import DreamdError, NotPermitted, UnknownUser
from dreamd.ids import DEFAULT_USER
from dreamd.store.interface import Store
from dreamd.store.tokens import add_token, live_tokens, revoke_token, token_row, token_rows

if TYPE_CHECKING:
    from dreamd.memory.api import Memory, NewTurn

SCOPES = ("read", "write", "erase")  # read memory; add turns and corrections; erase
PREFIX = "dmd_"


@dataclass(frozen=True)
class Grant:
    """What a request may do: for which users (None: every user) and what."""

    users: frozenset[str] | None
    scopes: frozenset[str]
    name: str

    def sees(self, user: str) -> bool:
        return self.users is None or user in self.users

    def may(self, scope: str) -> bool:
        return scope in self.scopes


OPERATOR = Grant(None, frozenset(SCOPES), "operator")  # the server's own token, or none


def permit(grant: Grant, scope: str, user: str | None) -> None:
    """Refuse what `grant` may not do to `user`'s memory. A user beyond the grant is
    unknown to it (404 over HTTP: it cannot tell another user from no user); a scope it
    lacks is refused (403)."""
    if user is not None and not grant.sees(user):
        raise UnknownUser(f"no user {user!r} in this memory file")
    if not grant.may(scope):
        raise NotPermitted(f"this token may not {scope} (its scopes: "
                           f"{', '.join(sorted(grant.scopes))})")


def permit_turns(memory: Memory, grant: Grant, turns: list[NewTurn]) -> None:
    """Refuse turns `grant` may not write: beyond its users, or into a session of a
    user beyond them (as if that user were unknown)."""
    permit(grant, "write", None)
    if grant.users is None:
        return
    for turn in turns:
        named = turn.user or DEFAULT_USER  # where an unfiled session's turns go
        permit(grant, "write", named)
        permit(grant, "write", memory.whose(turn.session_id, turn.user) or named)


def permit_all(grant: Grant) -> None:
    """Refuse a view of every user (the list of users, status, metrics) to a token
    limited to some."""
    if grant.users is not None:
        raise NotPermitted("this token is limited to some users; this shows every user")


def _digest(secret: str, salt: str) -> str:
    # n=2**14, r=8: 16 MB and a few tens of milliseconds a check; the server checks a
    # token once and remembers the answer for a while (serve/keyring.py).
    return hashlib.scrypt(secret.encode(), salt=bytes.fromhex(salt), n=2**14, r=8, p=1,
                          dklen=32).hex()


def issue(store: Store, name: str, users: tuple[str, ...] | None, scopes: tuple[str, ...],
          now: datetime) -> tuple[int, str]:
    """A new token (its id, and the token itself, which is not stored)."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise DreamdError(f"a token's scopes are {', '.join(SCOPES)}; got "
                          f"{', '.join(unknown) or 'none'}")
    if users is not None and not users:
        raise DreamdError("a token needs at least one user (--user), or --all-users")
    secret, salt = secrets.token_urlsafe(32), secrets.token_hex(16)
    ordered = tuple(s for s in SCOPES if s in scopes)
    with store.write() as conn:
        token_id = add_token(conn, name, salt, _digest(secret, salt), users, ordered,
                             now.isoformat())
    return token_id, f"{PREFIX}{token_id}_{secret}"


def check(store: Store, token: str) -> Grant | None:
    """The grant of a live token, or None for anything else."""
    head, _, secret = token.removeprefix(PREFIX).partition("_")
    if not token.startswith(PREFIX) or not head.isdigit() or not secret:
        return None
    with store.read() as conn:
        row = token_row(conn, int(head))
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(_digest(secret, row.salt), row.digest):
        return None
    return Grant(None if row.users is None else frozenset(row.users), frozenset(row.scopes),
                 row.name)


def live(store: Store) -> int:
    """How many issued tokens are not revoked."""
    with store.read() as conn:
        return live_tokens(conn)


def listing(store: Store) -> list[dict[str, Any]]:
    """Every token issued, without its hash."""
    with store.read() as conn:
        rows = token_rows(conn)
    return [{"id": r.id, "name": r.name, "users": None if r.users is None else list(r.users),
             "scopes": list(r.scopes), "created_at": r.created_at, "revoked_at": r.revoked_at}
            for r in rows]


def revoke(store: Store, token_id: int, now: datetime) -> None:
    with store.write() as conn:
        if not revoke_token(conn, token_id, now.isoformat()):
            raise DreamdError(f"no live token {token_id} (dreamd tokens list shows them)")

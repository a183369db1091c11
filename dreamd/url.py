"""Which stores are named by a URL, and how a URL may be shown (a leaf: imports nothing
of dreamd's, so config and every engine can use it)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

# The URL schemes that name a PostgreSQL store; anything else is a SQLite file's path.
PG_SCHEMES = ("postgresql://", "postgres://")


def is_url(target: str) -> bool:
    """Whether `target` names a PostgreSQL store rather than a file."""
    return target.startswith(PG_SCHEMES)


def shown(url: str) -> str:
    """The URL as a person may see it: never a password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))

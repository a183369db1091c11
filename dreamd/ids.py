"""Row keys of the per-user tiers; the default user keeps the prior-art keys."""

from __future__ import annotations

DEFAULT_USER = "default"


def profile_id(user_id: str) -> str:
    return "self" if user_id == DEFAULT_USER else f"user:{user_id}"


def narrative_id(user_id: str) -> str:
    return "current" if user_id == DEFAULT_USER else f"user:{user_id}"


def self_state_id(agent_id: str, user_id: str) -> str:
    """The agent's reflection state with one user. The default user's lives in the agent's
    own row (beside the drives), where a prior-art chat app reads it."""
    return agent_id if user_id == DEFAULT_USER else f"{agent_id}:user:{user_id}"


def era_key(user_id: str, month: str) -> str:
    """An era's key in dreamd's own tables (vectors, outputs, failures)."""
    return f"{user_id}|{month}"


def split_era_key(key: str) -> tuple[str, str]:
    user_id, _, month = key.rpartition("|")  # a month never holds "|"; a user id may
    return user_id, month


def user_key(user_id: str) -> str:
    """What a worker holds while it works on a user: the user's lease, and the lock every
    write of that user's memory takes on a shared store."""
    return f"user:{user_id}"


def user_keys(users: list[str] | None) -> list[str]:
    """The keys of these users (none for None, everyone's: SQLite's single writer)."""
    return [user_key(u) for u in users or ()]


def session_key(session_id: str) -> str:
    """The lock a write that files turns under a session takes, so that two writers
    cannot give one new session two owners."""
    return f"session:{session_id}"


def agent_key(agent_id: str) -> str:
    """The agent's own work (reflect over every user): its lease."""
    return f"agent:{agent_id}"

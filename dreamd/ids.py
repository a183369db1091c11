"""Row keys of the single-row tiers, per user; the default user keeps the prior-art keys."""

from __future__ import annotations

DEFAULT_USER = "default"


def profile_id(user_id: str) -> str:
    return "self" if user_id == DEFAULT_USER else f"user:{user_id}"


def narrative_id(user_id: str) -> str:
    return "current" if user_id == DEFAULT_USER else f"user:{user_id}"

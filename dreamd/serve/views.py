"""What the API, the page and the MCP tools show: plain dicts read from one store."""

from __future__ import annotations

from typing import Any

from dreamd import report
from dreamd.config import Config
from dreamd.memory.api import Memory
from dreamd.memory.context import Context
from dreamd.memory.context import build as build_context
from dreamd.memory.recall import Hit
from dreamd.models import Fact
from dreamd.store.facts import facts_of, withdrawn_facts
from dreamd.store.interface import Store
from dreamd.store.turns import session_turns, sessions_of_turns


def user_memory(store: Store, config: Config, user: str, gists: int = 5) -> dict[str, Any]:
    """`dreamd show` for one user, with every fact (current and replaced), its days and
    the turns it came from."""
    data = report.memory(store, config, gists=gists, user=user)
    with store.read() as conn:
        facts = facts_of(conn, user)
        withdrawn = withdrawn_facts(conn, user)
        session_of = dict(sessions_of_turns(conn, [t for f in facts for t in f.sources]))
    data["facts"] = [_fact(f, session_of) for f in facts]
    data["withdrawn"] = [_fact(f, session_of) for f in withdrawn]
    return data


def _fact(f: Fact, session_of: dict[int, str]) -> dict[str, Any]:
    return {"id": f.id, "subject": f.subject, "about": f.about, "statement": f.statement,
            "current": f.current, "since": f.valid_from, "learned_at": f.learned_at,
            "until": f.valid_to, "replaced_by": f.replaced_by, "origin": f.origin,
            "version": f.version, "pinned": f.pinned, "withdrawn": f.withdrawn,
            "from_turns": [{"id": t, "session": session_of.get(t)} for t in f.sources]}


def context_block(memory: Memory, session: str | None, user: str | None,
                  query: str | None, budget: int) -> tuple[str | None, Context]:
    """Whose context it is and the block: `user`'s (default: the configured one) between
    conversations; the session's user's; for a new conversation no user was named for,
    no one's (an empty block: a server for many people must not hand a stranger the
    default user's memory)."""
    who = user or memory.config.user.id if session is None else memory.whose(session, user)
    if who is None:
        return None, build_context({}, budget)
    return who, memory.context(session, user=user, query=query, budget=budget)


def hit(h: Hit) -> dict[str, Any]:
    return {"id": h.exchange_id, "session": h.session_id, "role": h.role,
            "content": h.content, "created_at": h.created_at, "when": h.when,
            "score": round(h.score, 4)}


def session(store: Store, session_id: str, limit: int) -> list[dict[str, Any]]:
    """A session's first `limit` turns, oldest first."""
    with store.read() as conn:
        rows = session_turns(conn, session_id, 0, 2**62, limit)
    return [{"id": t.id, "role": t.role, "content": t.content, "created_at": t.created_at}
            for t in rows]

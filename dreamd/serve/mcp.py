"""The MCP server (the official `mcp` SDK): recall, the context block, remember a turn,
read a user's memory; forget only when `serve.mcp_forget` says so. The same tools over
stdio (`dreamd mcp`) and over streamable HTTP at /mcp under `dreamd serve`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from dreamd import __version__
from dreamd.config import Config
from dreamd.errors import DreamdError
from dreamd.memory.api import NewTurn
from dreamd.memory.users import require_user
from dreamd.serve import views
from dreamd.serve.pool import Pool
from dreamd.serve.schema import TurnIn
from dreamd.store.failure import engine_failure

T = TypeVar("T")

INSTRUCTIONS = ("Long-term memory of a chat companion, consolidated by dreamd while it "
                "sleeps. Use `context` before answering a user, `recall` to look up what "
                "was said, `remember` to store a turn, `memory` to read what dreamd keeps "
                "about a user.")


def answered(tool: Callable[..., T]) -> Callable[..., T]:
    """A refusal reaches the client as the tool's error, in one line (the SDK logs any
    other exception as a crash, with its traceback)."""

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return tool(*args, **kwargs)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ToolError(f"{where}: {first.get('msg', 'invalid')}") from None
        except (DreamdError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            known = engine_failure(exc)
            if known is None:
                raise
            raise ToolError(str(known)) from None

    return call


def make(pool: Pool, config: Config) -> MCPServer:
    server: MCPServer = MCPServer("dreamd", instructions=INSTRUCTIONS, version=__version__,
                                   log_level="WARNING")
    limits = config.serve

    def known(memory: Any, user: str | None, session: str | None = None) -> None:
        if user is not None:
            with memory.store.read() as conn:
                require_user(conn, user, session)

    @server.tool()
    @answered
    def recall(query: str, user: str | None = None, k: int = 10,
               session: str | None = None) -> dict[str, Any]:
        """The k turns most relevant to `query` among one user's sessions (default: the
        configured user), best first, with the day each was said."""
        _bounded("k", k, 1, limits.max_k)
        with pool.memory(user or config.user.id) as memory:
            known(memory, user, session)
            hits = memory.recall(query, k=k, session=session,
                                 users=[user or config.user.id])
        return {"hits": [views.hit(h) for h in hits]}

    @server.tool()
    @answered
    def context(user: str | None = None, session: str | None = None,
                query: str | None = None, budget: int = 1000) -> dict[str, Any]:
        """The context block to put in a prompt, within `budget` tokens: profile, facts,
        narrative, eras, relevant earlier conversations and details, and the session's
        recent turns."""
        _bounded("budget", budget, 50, limits.max_budget)
        with pool.memory(user or session or config.user.id) as memory:
            block = memory.context(session, user=user, query=query, budget=budget)
        return {"text": block.text, "tokens": block.tokens}

    @server.tool()
    @answered
    def remember(session: str, role: str, content: str, user: str | None = None,
                 created_at: str | None = None) -> dict[str, Any]:
        """Store one turn of a conversation (role: user or assistant); dreamd embeds and
        consolidates it. A new session is filed under `user`."""
        turn = TurnIn.model_validate({"session": session, "role": role, "content": content,
                                      "user": user, "created_at": created_at})
        with pool.memory() as memory:
            ids = memory.remember_all([NewTurn(turn.session, turn.role, turn.content,
                                               turn.created_at, turn.user)],
                                       embed=True)  # an agent may recall it at once
        return {"id": ids[0]}

    @server.tool()
    @answered
    def memory(user: str | None = None) -> dict[str, Any]:
        """What dreamd keeps about a user: profile, facts (current and replaced, with
        days), eras, narrative, self-state, latest gists."""
        with pool.memory() as held:
            return views.user_memory(held.store, config, user or config.user.id)

    if limits.mcp_forget:
        @server.tool()
        @answered
        def forget(user: str, session: str | None = None, before: str | None = None,
                   dry_run: bool = True) -> dict[str, Any]:
            """Erase a user's turns (all, one session, or before a date) and what dreamd
            built from them. A dry run (the default) only says what would go."""
            with pool.memory() as held:
                return held.forget(user, session=session, before=before,
                                   dry_run=dry_run).as_dict()

    return server


def _bounded(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


"""The MCP server (the official `mcp` SDK): recall, the context block, remember a turn,
read a user's memory; forget only when `serve.mcp_forget` says so. The same tools over
stdio (`dreamd mcp`) and over streamable HTTP at /mcp under `dreamd serve`."""

# No `from __future__ import annotations`: the SDK reads the tools' annotations, which
# name bounds from the config, when each tool is defined.
import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from dreamd import __version__
from dreamd.config import Config
from dreamd.errors import DreamdError, NotPermitted
from dreamd.memory.api import NewTurn
from dreamd.memory.tokens import OPERATOR, Grant, permit, permit_turns
from dreamd.memory.users import require_user
from dreamd.serve import views
from dreamd.serve.memories import Memories
from dreamd.serve.schema import (
    CONTENT,
    ID,
    ContextBlock,
    CorrectionOut,
    FactOut,
    Facts,
    Forgotten,
    History,
    Hit,
    Recalled,
    Remembered,
    TurnIn,
    UserMemory,
)
from dreamd.serve.steering import correction_out, fact_out
from dreamd.store.failure import engine_failure

T = TypeVar("T")

INSTRUCTIONS = ("Long-term memory of a chat companion, consolidated by dreamd while it "
                "sleeps. Use `context` before answering a user, `recall` to look up what "
                "was said, `remember` to store a turn, `memory` to read what dreamd keeps "
                "about a user.")


def one_line(exc: ValidationError) -> str:
    """A validation error as HTTP says it: where, and what is wrong."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


def answered(tool: Callable[..., T]) -> Callable[..., T]:
    """A refusal reaches the client as the tool's error, in one line (the SDK logs any
    other exception as a crash, with its traceback)."""

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return tool(*args, **kwargs)
        except ValidationError as exc:
            raise ToolError(one_line(exc)) from None
        except (DreamdError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            known = engine_failure(exc)
            if known is None:
                raise
            raise ToolError(str(known)) from None

    return call


class Server(MCPServer):
    """The SDK's server, except that arguments its schema refuses are told in one line,
    as HTTP tells them (the SDK's text runs to several, with a link)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(one_line(exc.__cause__)) from None
            raise


# The tools' parameters, with what they mean and the bounds HTTP holds them to.
UserId = Annotated[str, Field(pattern=ID, max_length=200, description="The user's id.")]
UserOpt = Annotated[str | None, Field(pattern=ID, max_length=200, description=(
    "The user's id (default: the configured user)."))]
Session = Annotated[str, Field(pattern=ID, max_length=200, description="The session's id.")]
SessionOpt = Annotated[str | None, Field(pattern=ID, max_length=200, description=(
    "A session's id: only its turns (recall), or the conversation the block is for."))]
Query = Annotated[str, Field(min_length=1, max_length=2000, description=(
    "What to look for, in words."))]
QueryOpt = Annotated[str | None, Field(max_length=2000, description=(
    "What the block should be relevant to (default: the session's last user turn)."))]
Role = Annotated[Literal["user", "assistant"], Field(description="Who spoke.")]
Content = Annotated[str, Field(min_length=1, description="What was said.")]
FactNumber = Annotated[int, Field(ge=1, description="The id (from the facts tool).")]
Words = Annotated[str, Field(min_length=1, max_length=300, pattern=CONTENT,
                             description="The fact in a sentence.")]
Version = Annotated[int, Field(ge=1, description=(
    "The version the facts tool showed: a stale one is refused."))]
Reason = Annotated[str | None, Field(max_length=500, description="Why, for the history.")]
When = Annotated[str | None, Field(max_length=40, description=(
    "When it was said, ISO 8601 (UTC when it names no zone; default: now)."))]


def make(memories: Memories, config: Config) -> MCPServer:
    server: MCPServer = Server("dreamd", instructions=INSTRUCTIONS, version=__version__,
                                   log_level="WARNING")
    limits = config.serve
    K = Annotated[int, Field(ge=1, le=limits.max_k, description="How many turns, at most.")]
    Budget = Annotated[int, Field(ge=50, le=limits.max_budget,
                                  description="Tokens the block may take, at most.")]
    reading = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                              idempotent_hint=True, open_world_hint=False)

    @server.tool(title="Recall what was said", annotations=reading)
    @answered
    def recall(ctx: Context, query: Query, user: UserOpt = None, k: K = 10,
               session: SessionOpt = None) -> Recalled:
        """The k turns most relevant to `query` among one user's sessions, best first,
        with the day each was said."""
        who = user or config.user.id
        permit(grant_in(ctx), "read", who)
        with memories.memory(who) as memory:
            if user is not None:
                with memory.store.read() as conn:
                    require_user(conn, user, session)
            hits = memory.recall(query, k=k, session=session, users=[who])
        return Recalled(user=who, hits=[Hit.model_validate(views.hit(h)) for h in hits])

    @server.tool(title="The context block for a prompt", annotations=reading)
    @answered
    def context(ctx: Context, user: UserOpt = None, session: SessionOpt = None,
                query: QueryOpt = None, budget: Budget = 1000) -> ContextBlock:
        """The context block to put in a prompt, within `budget` tokens: profile, facts,
        narrative, eras, relevant earlier conversations and details, and the session's
        recent turns. A session no one has spoken in yet is a new conversation of
        `user`."""
        with memories.memory(user or session or config.user.id) as memory:
            permit(grant_in(ctx), "read", user)
            who, block = views.context_block(memory, session, user, query, budget)
            permit(grant_in(ctx), "read", who)
        return ContextBlock(user=who, session=session, budget=budget, tokens=block.tokens,
                            text=block.text,
                            sections={tier: list(lines) for tier, lines in block.sections})

    @server.tool(title="Remember a turn", annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False,
        open_world_hint=False))
    @answered
    def remember(ctx: Context, session: Session, role: Role, content: Content,
                 user: UserOpt = None, created_at: When = None) -> Remembered:
        """Store one turn of a conversation; dreamd embeds it at once (recall finds it)
        and consolidates it in its next pass. A new session is filed under `user`."""
        turn = TurnIn.model_validate({"session": session, "role": role, "content": content,
                                      "user": user, "created_at": created_at})
        new = NewTurn(turn.session, turn.role, turn.content, turn.created_at, turn.user)
        with memories.memory() as memory:
            permit_turns(memory, grant_in(ctx), [new])
            ids = memory.remember_all([new], embed=True)  # an agent may recall it at once
        return Remembered(id=ids[0])

    @server.tool(title="What dreamd keeps about a user", annotations=reading)
    @answered
    def memory(ctx: Context, user: UserOpt = None) -> UserMemory:
        """What dreamd keeps about a user: profile, facts (current and replaced, with
        days), eras, narrative, self-state, latest gists."""
        who = user or config.user.id
        permit(grant_in(ctx), "read", who)
        with memories.memory(who) as held:
            return UserMemory.model_validate(views.user_memory(held.store, config, who))

    if limits.mcp_forget:
        @server.tool(title="Erase a user's turns", annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True,
            open_world_hint=False))
        @answered
        def forget(ctx: Context, user: UserId, session: SessionOpt = None,
                   before: Annotated[str | None, Field(
                       max_length=40, description="Erase only turns before this date "
                       "(ISO 8601).")] = None,
                   dry_run: Annotated[bool, Field(description="Only say what would go.")]
                   = True) -> Forgotten:
            """Erase a user's turns (all, one session, or before a date) and what dreamd
            built from them. A dry run (the default) only says what would go."""
            permit(grant_in(ctx), "erase", user)
            with memories.memory(user) as held:
                return Forgotten.model_validate(held.forget(
                    user, session=session, before=before, dry_run=dry_run).as_dict())

    steering(server, memories, limits.mcp_corrections)
    return server


def steering(server: MCPServer, memories: Memories, changes: bool) -> None:
    """A user's facts and their history (always), and a person's word on them (only when
    `serve.mcp_corrections` says so): the same operations and checks as over HTTP."""
    reading = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                              idempotent_hint=True, open_world_hint=False)
    changing = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                               idempotent_hint=False, open_world_hint=False)

    @server.tool(title="A user's facts, with ids and versions", annotations=reading)
    @answered
    def facts(ctx: Context, user: UserId, after: Annotated[int, Field(
                  ge=0, description="The last id of the page before (0: from the start).")]
              = 0, limit: Annotated[int, Field(ge=1, le=500, description="How many, at most.")]
              = 100, history: Annotated[bool, Field(description=(
                  "Replaced and withdrawn facts too."))] = False) -> Facts:
        """The user's facts by id, each with its version (send it back with a change)."""
        permit(grant_in(ctx), "read", user)
        with memories.memory(user) as memory:
            page = memory.facts(user, after_id=after, limit=limit + 1, history=history)
        return Facts(user=user, facts=[fact_out(f) for f in page[:limit]],
                     next=page[limit - 1].id if len(page) > limit else None)

    @server.tool(title="The history of a fact", annotations=reading)
    @answered
    def fact_history(ctx: Context, user: UserId, fact_id: FactNumber) -> History:
        """Every correction of the fact: who, when, what and why."""
        permit(grant_in(ctx), "read", user)
        with memories.memory(user) as memory:
            rows = memory.history(user, fact_id)
        return History(user=user, fact_id=fact_id, corrections=[correction_out(c)
                                                               for c in rows])

    if not changes:
        return

    @server.tool(title="Correct a fact", annotations=changing)
    @answered
    def correct_fact(ctx: Context, user: UserId, fact_id: FactNumber, statement: Words,
                     version: Version, why: Reason = None) -> FactOut:
        """New words for a fact the user said was wrong; the old words stay in its
        history. A stale `version` is refused: read the fact again."""
        grant = grant_in(ctx)
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.correct(user, fact_id, statement, by=grant.name, why=why,
                                           expected_version=version))

    @server.tool(title="Retract a fact", annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False,
        open_world_hint=False))
    @answered
    def retract_fact(ctx: Context, user: UserId, fact_id: FactNumber, version: Version,
                     why: Reason = None) -> FactOut:
        """The fact is wrong: it leaves every tier and context block, and is not made
        again from what was said so far (revert the retraction to undo it)."""
        grant = grant_in(ctx)
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.retract(user, fact_id, by=grant.name, why=why,
                                           expected_version=version))

    @server.tool(title="Pin or unpin a fact", annotations=changing)
    @answered
    def pin_fact(ctx: Context, user: UserId, fact_id: FactNumber, version: Version,
                 pinned: Annotated[bool, Field(description="True to pin, false to unpin.")]
                 = True, why: Reason = None) -> FactOut:
        """A pinned fact is in the profile and the context block whatever the ranking."""
        grant = grant_in(ctx)
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            change = memory.pin if pinned else memory.unpin
            return fact_out(change(user, fact_id, by=grant.name, why=why,
                                   expected_version=version))

    @server.tool(title="Add a fact the user states", annotations=changing)
    @answered
    def add_fact(ctx: Context, user: UserId, statement: Words, why: Reason = None) -> FactOut:
        """A fact the user states directly, with no turn behind it."""
        grant = grant_in(ctx)
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.add_fact(user, statement, by=grant.name, why=why))

    @server.tool(title="Revert a correction", annotations=changing)
    @answered
    def revert_correction(ctx: Context, user: UserId, correction_id: FactNumber,
                          why: Reason = None) -> CorrectionOut:
        """Undo one correction (see fact_history for their ids)."""
        grant = grant_in(ctx)
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return correction_out(memory.revert(user, correction_id, by=grant.name,
                                                why=why))


def grant_in(ctx: Context) -> Grant:
    """What the caller may do: over HTTP, what its token may (the guard said); over
    stdio, or called in the process, everything (the operator's own)."""
    try:
        request = ctx.request_context.request
    except ValueError:  # no request: called in the process
        return OPERATOR
    if request is None:  # stdio
        return OPERATOR
    grant = getattr(getattr(request, "state", None), "grant", None)
    if not isinstance(grant, Grant):  # an HTTP request the guard did not see: nothing
        raise NotPermitted("no token was checked for this request")
    return grant

"""The HTTP server: the JSON API under /v1, health, metrics, the MCP endpoint and the
page, on one FastAPI app that uvicorn runs.

FastAPI (on Starlette, which the MCP SDK's HTTP transport already runs on) because it
writes the OpenAPI document from the routes' own types: a TypeScript or Go client is
generated from /openapi.json, and the document cannot drift from the code.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations,
# which name bounds from the config, when each route is defined.
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from dreamd import __version__, report
from dreamd.config import Config
from dreamd.dream.factory import embedder_model_name
from dreamd.errors import DreamdError
from dreamd.logger import Logger
from dreamd.memory import users as users_
from dreamd.memory.api import NewTurn
from dreamd.memory.export import export_user
from dreamd.memory.tokens import permit, permit_all, permit_turns
from dreamd.serve import page, site, steering, views
from dreamd.serve.answers import GUARDED, Granted, answers, status_of
from dreamd.serve.guard import Guard, is_loopback, is_page
from dreamd.serve.keyring import Keyring
from dreamd.serve.memories import Memories
from dreamd.serve.metrics import Metrics
from dreamd.serve.schema import (
    ID,
    MEANING,
    WHEN,
    ContextBlock,
    Export,
    Forgotten,
    Health,
    Ready,
    Recalled,
    Sessions,
    Status,
    Stored,
    TurnIn,
    TurnsIn,
    UserMemory,
    Users,
)
from dreamd.store.failure import engine_failure
from dreamd.store.turns import newest_turn_id

# The request's parts the routes share: a user in the path, an optional id, a limit.
User = Annotated[str, Path(pattern=ID, max_length=200)]
OptId = Annotated[str | None, Query(pattern=ID, max_length=200)]
Limit = Annotated[int, Query(ge=1, le=1000, description="How many, at most.")]


def build(config: Config, memories: Memories, *, keyring: Keyring, log: Logger,
          mcp_routes: list[Any] | None = None,
          lifespan: Any = None) -> Any:
    """The ASGI app: the API behind the guard (and CORS when origins are configured)."""
    s = config.serve
    # No /docs or /redoc: they load their scripts from a CDN, and the page runs none.
    api = FastAPI(title="dreamd", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Memory a chat companion slept on: recall, the context "
                  "block, what dreamd made of each user, and why it dreamed.")
    metrics = Metrics(memories, config)
    _answer_errors(api, metrics, log)
    _health_routes(api, memories)
    _memory_routes(api, memories, config)
    _user_routes(api, memories, config)
    _status_routes(api, memories, config, metrics)
    open_note = None if keyring.required else (
        "No API token is set: any program on this machine can read and change this memory.")
    site.add_routes(api, memories, config, open_note)
    steering.add_routes(api, memories)
    for route in mcp_routes or []:
        api.router.routes.append(route)
    api.openapi = lambda: contract(api)  # type: ignore[method-assign]

    app: Any = api
    origins = tuple(o.strip() for o in s.cors_origins.split(",") if o.strip())
    if origins:
        app = CORSMiddleware(app, allow_origins=list(origins), allow_credentials=False,
                             allow_methods=["GET", "POST", "DELETE"],
                             allow_headers=["authorization", "content-type"])
    return Guard(app, keyring=keyring, loopback=is_loopback(s.host), origins=origins,
                 max_body=s.max_body_kb * 1024)


def allowed(api: FastAPI, path: str) -> str:
    """A 405's Allow: the methods of the most specific route the path matches. A user id
    may hold "/", so /v1/users/ana/facts/3 also matches DELETE /v1/users/{user} (the user
    "ana/facts/3"); the document, and this header, call it Ana's fact 3."""
    matching = [r for r in api.routes if isinstance(r, APIRoute) and r.path_regex.match(path)]
    if not matching:
        return ""
    longest = max(len(r.path_format) for r in matching)
    return ", ".join(sorted({m for r in matching if len(r.path_format) == longest
                             for m in r.methods or ()}))


def contract(api: FastAPI) -> dict[str, Any]:
    """The OpenAPI document as the server really answers: errors are 400 with the one
    error model (never FastAPI's 422), and a bearer token guards every route but
    /healthz."""
    if api.openapi_schema is None:
        spec = get_openapi(title=api.title, version=api.version, routes=api.routes,
                           description=api.description)
        for path, operations in spec["paths"].items():
            for operation in operations.values():
                operation["responses"].pop("422", None)
                for code, answer in operation["responses"].items():
                    if int(code) >= 400:  # JSON, even where the route answers text
                        answer["content"] = {"application/json": {"schema": {
                            "$ref": "#/components/schemas/Problem"}}}
                if path == "/healthz":
                    operation["security"] = []
        schemas = spec.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        spec.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "The operator's token, or one `dreamd tokens add` "
                       "issued (none needed on loopback when the server has none)."}}
        spec["security"] = [{"bearer": []}]
        api.openapi_schema = spec
    return api.openapi_schema


def _known(memory: Any, user: str, session: str | None) -> None:
    with memory.store.read() as conn:
        users_.require_user(conn, user, session)



def fail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def failure(exc: DreamdError) -> JSONResponse:
    return fail(status_of(exc), str(exc))


def _answer_errors(api: FastAPI, metrics: Metrics, log: Logger) -> None:
    """Every error as one line of JSON (a page for a browser), and each request timed."""
    @api.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        # ("body", "TurnIn", "content") -> "content": the models' names mean nothing to
        # the caller; the place in the request does
        where = ".".join(str(p) for p in first.get("loc", ())
                         if p not in ("body", "TurnIn", "TurnsIn"))
        said = first.get("msg", "invalid")
        if first.get("type") == "string_pattern_mismatch":  # the pattern, in words
            said = f"must be {MEANING.get(first.get('ctx', {}).get('pattern'), 'well formed')}"
        return fail(400, f"{where or 'request'}: {said}")

    @api.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        answer = fail(exc.status_code, str(exc.detail))
        answer.headers.update(exc.headers or {})
        if exc.status_code == 405:
            answer.headers["allow"] = allowed(api, request.url.path)
        return answer

    @api.exception_handler(DreamdError)
    async def refused(request: Request, exc: DreamdError) -> Response:
        if is_page(request.url.path):  # a person's browser: a page, not JSON
            return site.html(page.refused(str(exc), "/", None, "Not shown"), status_of(exc))
        return failure(exc)

    @api.middleware("http")
    async def timed(request: Request, call_next: Any) -> Any:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception as exc:  # one line in the answer and in the log, no traceback
            known = engine_failure(exc)
            if known is not None:
                response = failure(known)
            else:
                log.error("request_failed", path=request.url.path,
                          error=f"{type(exc).__name__}: {exc}")
                response = fail(500, f"internal error, please report it: "
                                     f"{type(exc).__name__}")
        route = request.scope.get("route")
        metrics.request(getattr(route, "path", "other"), request.method,
                        response.status_code, time.perf_counter() - started)
        return response


def _health_routes(api: FastAPI, memories: Memories) -> None:
    @api.get("/healthz", tags=["health"], response_model=Health, responses=answers(403))
    def healthz() -> dict[str, Any]:
        """The process answers (no token needed)."""
        return {"ok": True, "version": __version__}

    @api.get("/readyz", tags=["health"], response_model=Ready, responses=answers(*GUARDED))
    def readyz(grant: Granted) -> dict[str, Any]:
        """The store answers."""
        with memories.memory() as memory, memory.store.read() as conn:
            newest = newest_turn_id(conn)
        return {"ready": True, "newest_turn": newest}


def _memory_routes(api: FastAPI, memories: Memories, config: Config) -> None:
    """Turns in; recall and the context block out."""
    s = config.serve

    @api.post("/v1/turns", status_code=201, tags=["turns"],
              responses=answers(*GUARDED, 404, 409, 413))
    def add_turns(grant: Granted, body: Annotated[TurnIn | TurnsIn, Body()],
                  embed: bool = False) -> Stored:
        """Add one turn, or a batch ({"turns": [...]}) in one transaction: what the
        app's own INSERT into `exchanges` does. dreamd embeds and consolidates them;
        `embed=true` embeds them now, so recall finds them at once."""
        given = body.turns if isinstance(body, TurnsIn) else [body]
        if len(given) > s.max_batch:
            raise HTTPException(413, f"{len(given)} turns in one request; at most "
                                f"{s.max_batch} (serve.max_batch)")
        turns = [NewTurn(t.session, t.role, t.content, t.created_at, t.user)
                 for t in given]
        with memories.memory() as memory:
            permit_turns(memory, grant, turns)
            return Stored(ids=memory.remember_all(turns, embed=embed))

    @api.get("/v1/recall", tags=["memory"], response_model=Recalled,
             responses=answers(*GUARDED, 404))
    def recall(grant: Granted, q: Annotated[str, Query(min_length=1, max_length=2000)],
               user: OptId = None, session: OptId = None,
               k: Annotated[int, Query(ge=1, le=s.max_k)] = 10) -> dict[str, Any]:
        """The k turns most relevant to q among one user's sessions."""
        who = user or config.user.id
        permit(grant, "read", who)
        with memories.memory(who) as memory:
            if user is not None:
                _known(memory, user, session)
            hits = memory.recall(q, k=k, session=session, users=[who])
        return {"user": who, "hits": [views.hit(h) for h in hits]}

    @api.get("/v1/context", tags=["memory"], response_model=ContextBlock,
             responses=answers(*GUARDED, 404))
    def context(grant: Granted, user: OptId = None, session: OptId = None,
                q: Annotated[str | None, Query(max_length=2000)] = None,
                budget: Annotated[int, Query(ge=50, le=s.max_budget)] = 1000,
                ) -> dict[str, Any]:
        """The context block for a prompt, within `budget` tokens: for `session` (its
        own user's memory and recent turns), or for `user` between conversations. A
        session no one has spoken in yet is a new conversation of `user` (no one's
        memory without `user`); a user with no turns yet has an empty block."""
        with memories.memory(user or session or config.user.id) as memory:
            permit(grant, "read", user)
            who, block = views.context_block(memory, session, user, q, budget)
            permit(grant, "read", who)
        return {"user": who, "session": session, "budget": budget,
                "tokens": block.tokens, "text": block.text,
                "sections": {tier: list(lines) for tier, lines in block.sections}}


def _user_routes(api: FastAPI, memories: Memories, config: Config) -> None:
    """Users, their sessions, memory and export, and forgetting them."""
    @api.get("/v1/users", tags=["users"], response_model=Users, responses=answers(*GUARDED))
    def list_users(grant: Granted, after: OptId = None, limit: Limit = 100) -> dict[str, Any]:
        """Users with their sessions, turns and turns not yet in a gist, by id: `limit`
        of them after `after` (the answer's `next`, while there are more)."""
        permit_all(grant)
        with memories.memory() as memory:
            return users_.users(memory.store, after=after, limit=limit)

    @api.get("/v1/users/{user:path}/sessions", tags=["users"], response_model=Sessions,
             responses=answers(*GUARDED, 404))
    def user_sessions(grant: Granted, user: User, after: OptId = None,
                      limit: Limit = 100) -> dict[str, Any]:
        """The user's sessions, by id, with their turns and backlog: `limit` of them
        after `after` (the answer's `next`, while there are more)."""
        permit(grant, "read", user)
        with memories.memory(user) as memory:
            return users_.sessions(memory.store, user, after=after, limit=limit)

    @api.get("/v1/users/{user:path}/memory", tags=["users"], response_model=UserMemory,
             responses=answers(*GUARDED, 404))
    def user_memory(grant: Granted, user: User,
                    gists: Annotated[int, Query(ge=0, le=1000)] = 5) -> dict[str, Any]:
        """Profile, facts (current and replaced, with days and source turns), eras,
        narrative, self-state and the latest gists."""
        permit(grant, "read", user)
        with memories.memory(user) as memory:
            return views.user_memory(memory.store, config, user, gists)

    @api.get("/v1/users/{user:path}/export", tags=["users"], response_model=Export,
             responses=answers(*GUARDED, 404))
    def export(grant: Granted, user: User) -> dict[str, Any]:
        """Everything stored about the user (the `dreamd export` document)."""
        permit(grant, "read", user)
        with memories.memory() as memory:
            return export_user(memory.store, user, config.agent.id)

    @api.delete("/v1/users/{user:path}", tags=["users"], response_model=Forgotten,
                responses=answers(*GUARDED, 404))
    def forget(grant: Granted, user: User, session: OptId = None,
               before: Annotated[str | None, Query(pattern=WHEN, max_length=40)] = None,
               dry_run: bool = False) -> dict[str, Any]:
        """Erase the user's turns (all, one session, or those before a date) and what
        dreamd built from them: what `dreamd forget` erases."""
        permit(grant, "erase", user)
        with memories.memory(user) as memory:
            return memory.forget(user, session=session, before=before,
                                 dry_run=dry_run).as_dict()


def _status_routes(api: FastAPI, memories: Memories, config: Config,
                   metrics: Metrics) -> None:
    @api.get("/v1/status", tags=["status"], response_model=Status,
             responses=answers(*GUARDED))
    def status(grant: Granted, runs: Annotated[int, Query(ge=1, le=200)] = 5
               ) -> dict[str, Any]:
        """Backlog, drives, the last passes and why each job ran, workers, failures and
        quarantine (`dreamd status --json`)."""
        permit_all(grant)
        with memories.memory() as memory:
            return report.status(memory.store, config, embedder_model_name(config),
                                 datetime.now(UTC), runs)

    @api.get("/metrics", tags=["status"], response_class=PlainTextResponse,
             responses=answers(*GUARDED))
    def prometheus(grant: Granted) -> PlainTextResponse:
        """Prometheus text: drives, backlog, the last pass, failures, requests."""
        permit_all(grant)
        body, kind = metrics.scrape()
        return PlainTextResponse(body, media_type=kind)

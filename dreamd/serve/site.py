"""The page's routes: the index, a user's memory, a session's turns, a fact's history,
and the forms with which a person corrects, retracts, pins, unpins or adds a fact, or
reverts a correction: plain HTML forms (no script runs on the page). Each form carries a
token tied to the page's own cookie (an HMAC of it under a key this process made), so a
form another site posts is refused even where a browser would send the cookie; the guard
refuses a foreign Origin besides. Every change answers 303 back to the page."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.
import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from dreamd import report
from dreamd.config import Config
from dreamd.dream.factory import embedder_model_name
from dreamd.errors import DreamdError
from dreamd.memory import users as users_
from dreamd.memory.tokens import Grant, permit, permit_all
from dreamd.serve import page, views
from dreamd.serve.answers import Granted, status_of
from dreamd.serve.guard import PAGE_POLICY
from dreamd.serve.memories import Memories
from dreamd.serve.schema import ID
from dreamd.serve.steering import correction_out

User = Annotated[str, Path(pattern=ID, max_length=200)]

COOKIE = "dreamd_page"  # the page's own id, for its forms' tokens
FORM_BYTES = 8192  # a form's fields, at most


class Forms:
    """The key the forms' tokens are made with (new with each server process: a page
    left open across a restart asks to be loaded again)."""

    def __init__(self) -> None:
        self.key = secrets.token_bytes(32)

    def token(self, page_id: str) -> str:
        return hmac.new(self.key, page_id.encode(), hashlib.sha256).hexdigest()

    def holds(self, request: Request, offered: str) -> bool:
        page_id = request.cookies.get(COOKIE)
        return page_id is not None and hmac.compare_digest(self.token(page_id), offered)


def page_id(request: Request) -> tuple[str, bool]:
    """The page's id from its cookie, or a new one (and whether it is new)."""
    known = request.cookies.get(COOKIE)
    return (known, False) if known else (secrets.token_urlsafe(24), True)


def html(text: str, status: int = 200, new_id: str | None = None) -> HTMLResponse:
    answer = HTMLResponse(text, status_code=status,
                          headers={"content-security-policy": PAGE_POLICY})
    if new_id is not None:
        answer.set_cookie(COOKIE, new_id, httponly=True, samesite="strict", path="/")
    return answer


async def fields(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last of each name); a body past FORM_BYTES is none."""
    body = await request.body()
    if len(body) > FORM_BYTES:
        return {}
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 19 else None


def add_routes(api: FastAPI, memories: Memories, config: Config, note: str | None) -> None:
    """The pages and the forms' POSTs. A user id may hold "/" (sent as %2F, which the
    server reads as "/"): the user's page takes the rest of the path, so it comes last."""
    forms = Forms()
    _form_routes(api, memories, forms, note)
    _page_routes(api, memories, config, forms, note)


def _at(user: str, fact: int | None = None) -> str:
    where = f"/users/{quote(user, safe='')}"
    return where + (f"#fact-{fact}" if fact is not None else "")


def _by(grant: Grant) -> str:
    return f"{grant.name} (page)"


def _form_routes(api: FastAPI, memories: Memories, forms: Forms, note: str | None) -> None:
    """The forms' POSTs: each changes a user's facts, then sends the browser back."""

    async def change(request: Request, user: str, back: str,
                     act: Callable[[Any, dict[str, str], Grant], object]) -> Response:
        form = await fields(request)
        grant: Grant = request.state.grant
        if not forms.holds(request, form.get("csrf", "")):
            return html(page.refused("this form is stale or not this page's: load the "
                                     "page again", back, note), 403)
        try:
            permit(grant, "write", user)

            def run() -> object:
                with memories.memory(user) as memory:
                    return act(memory, form, grant)

            await run_in_threadpool(run)
        except DreamdError as exc:
            return html(page.refused(str(exc), back, note), status_of(exc))
        return RedirectResponse(back, status_code=303)

    @api.post("/users/{user:path}/facts/{fact_id}/correct", include_in_schema=False)
    async def correct(request: Request, user: str, fact_id: int) -> Response:
        return await change(request, user, _at(user, fact_id), lambda m, f, g: m.correct(
            user, fact_id, f.get("statement", ""), by=_by(g), why=f.get("why"),
            expected_version=number(f.get("version"))))

    @api.post("/users/{user:path}/facts/{fact_id}/retract", include_in_schema=False)
    async def retract(request: Request, user: str, fact_id: int) -> Response:
        return await change(request, user, _at(user), lambda m, f, g: m.retract(
            user, fact_id, by=_by(g), why=f.get("why"),
            expected_version=number(f.get("version"))))

    @api.post("/users/{user:path}/facts/{fact_id}/pin", include_in_schema=False)
    async def pin(request: Request, user: str, fact_id: int) -> Response:
        return await change(request, user, _at(user, fact_id), lambda m, f, g: m.pin(
            user, fact_id, by=_by(g), expected_version=number(f.get("version"))))

    @api.post("/users/{user:path}/facts/{fact_id}/unpin", include_in_schema=False)
    async def unpin(request: Request, user: str, fact_id: int) -> Response:
        return await change(request, user, _at(user, fact_id), lambda m, f, g: m.unpin(
            user, fact_id, by=_by(g), expected_version=number(f.get("version"))))

    @api.post("/users/{user:path}/facts", include_in_schema=False)
    async def add(request: Request, user: str) -> Response:
        return await change(request, user, _at(user), lambda m, f, g: m.add_fact(
            user, f.get("statement", ""), by=_by(g), why=f.get("why")))

    @api.post("/users/{user:path}/corrections/{correction_id}/revert",
              include_in_schema=False)
    async def revert(request: Request, user: str, correction_id: int) -> Response:
        return await change(request, user, _at(user), lambda m, f, g: m.revert(
            user, correction_id, by=_by(g)))


def _page_routes(api: FastAPI, memories: Memories, config: Config, forms: Forms,
                 note: str | None) -> None:
    """The pages, the user's own last (it takes the rest of the path)."""
    @api.get("/users/{user:path}/facts/{fact_id}/retract", include_in_schema=False)
    def confirm(request: Request, user: str, fact_id: int) -> HTMLResponse:
        permit(request.state.grant, "write", user)
        with memories.memory(user) as memory:
            found = [f for f in memory.facts(user, after_id=fact_id - 1, limit=1)
                     if f.id == fact_id]
        if not found:
            return html(page.refused(f"user {user!r} has no current fact {fact_id}",
                                     _at(user), note), 404)
        known, new = page_id(request)
        fact = {"id": fact_id, "statement": found[0].statement, "version": found[0].version}
        return html(page.retracting(user, fact, forms.token(known), note),
                    new_id=known if new else None)

    @api.get("/users/{user:path}/facts/{fact_id}/history", include_in_schema=False)
    def history(request: Request, user: str, fact_id: int) -> HTMLResponse:
        grant: Grant = request.state.grant
        permit(grant, "read", user)
        with memories.memory(user) as memory:
            rows = [correction_out(c).model_dump() for c in memory.history(user, fact_id)]
        known, new = page_id(request)
        csrf = forms.token(known) if grant.sees(user) and grant.may("write") else None
        return html(page.history(user, fact_id, rows, csrf, note),
                    new_id=known if new else None)

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(grant: Granted, after: Annotated[str | None, Query(
            pattern=ID, max_length=200)] = None) -> HTMLResponse:
        permit_all(grant)
        with memories.memory() as memory:
            listing = users_.users(memory.store, after=after, limit=page.USERS_SHOWN)
            state = report.status(memory.store, config, embedder_model_name(config),
                                  datetime.now(UTC), page.RUNS)
        return html(page.index(listing, state, config, note))

    @api.get("/users/{user:path}/sessions/{session:path}", response_class=HTMLResponse,
             include_in_schema=False)
    def session_page(grant: Granted, user: User,
                     session: Annotated[str, Path(max_length=200)]) -> HTMLResponse:
        permit(grant, "read", user)
        with memories.memory() as memory:
            with memory.store.read() as conn:
                users_.require_user(conn, user, session)
            turns = views.session(memory.store, session, page.SESSION_TURNS)
        return html(page.session(user, session, turns, note))

    @api.get("/users/{user:path}", response_class=HTMLResponse, include_in_schema=False)
    def user_page(request: Request, grant: Granted, user: User) -> HTMLResponse:
        permit(grant, "read", user)
        with memories.memory() as memory:
            data = views.user_memory(memory.store, config, user, gists=20)
        known, new = page_id(request)
        csrf = forms.token(known) if grant.may("write") else None
        return html(page.user(data, note, csrf), new_id=known if new else None)

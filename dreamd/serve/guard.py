"""What every request passes before a route sees it: the Host a loopback server answers
to (no DNS rebinding), the bearer token, a bounded body, and the origins a browser may
send from. A refusal is a JSON body with one line (an HTML page for the page's paths)."""

from __future__ import annotations

import html
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool

from dreamd.memory.tokens import OPERATOR
from dreamd.serve.keyring import Keyring

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN = frozenset({"/healthz"})  # answered without a token
COOKIE = "dreamd_token"
BODIED = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The page runs no script, whatever a turn holds, and no other site may frame it.
PAGE_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
               "form-action 'self'; frame-ancestors 'none'")
# Every answer, JSON or HTML: not to be framed, sniffed into another type, or followed by
# a Referer that carries its address.
SAFE_HEADERS = ((b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
                (b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                (b"referrer-policy", b"no-referrer"))


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address literal (127.0.0.0/8, ::1). A name that only
    begins like one (127.0.0.1.attacker.example) is not: DNS may point it anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(value: str) -> str:
    """The host of a Host header or an origin's authority, without its port."""
    if value.startswith("["):  # [::1]:8765
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_page(path: str) -> bool:
    """The page's paths (HTML for people), as against the API's (JSON for programs)."""
    return path == "/" or path.startswith("/users/")


class Guard:
    """The outermost layer: it refuses what no route should see, and tells the routes
    what the request's token may do (`scope["state"]["grant"]`, a `Grant`)."""

    def __init__(self, app: App, *, keyring: Keyring, loopback: bool,
                 origins: tuple[str, ...], max_body: int) -> None:
        self.app, self.keyring, self.loopback = app, keyring, loopback
        self.origins, self.max_body = origins, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_safe_headers(send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        path, method = scope["path"], scope["method"]
        if self.loopback and not is_loopback(host_of(headers.get("host", ""))):
            await refuse(send, path, 403, f"this server answers to 127.0.0.1 and localhost, "
                         f"not to Host {headers.get('host', '')!r}")
            return
        origin = headers.get("origin")
        if (origin is not None and method in BODIED
                and not self._origin_allowed(origin, scope, headers.get("host", ""))):
            await refuse(send, path, 403, f"requests from origin {origin!r} are not allowed "
                         "(serve.cors_origins)")
            return
        grant = OPERATOR  # no token set: loopback only, and everyone there is the operator
        if self.keyring.required and path not in OPEN:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            offered = query.get("token", [None])[0]
            if is_page(path) and method == "GET" and offered is not None:
                await self._sign_in(scope, send, offered, query)
                return
            shown = _token_shown(headers)
            found = None if shown is None else await run_in_threadpool(
                self.keyring.grant, shown)
            if found is None:
                await refuse(send, path, 401, "a bearer token is required "
                             "(Authorization: Bearer <token>)", {"www-authenticate": "Bearer"})
                return
            grant = found
        scope.setdefault("state", {})["grant"] = grant
        if method in BODIED:
            body = await _read_body(receive, self.max_body)
            if body is None:
                await refuse(send, path, 413, f"the request body is larger than "
                             f"{self.max_body // 1024} KB (serve.max_body_kb)")
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str, scope: Scope, host: str) -> bool:
        """A configured origin, or this server's own: its scheme, host and port (the
        Host a loopback server answers to has been checked by then)."""
        return origin in self.origins or origin == f"{scope.get('scheme', 'http')}://{host}"

    async def _sign_in(self, scope: Scope, send: Send, offered: str,
                       query: dict[str, list[str]]) -> None:
        """`/?token=…` (the page's sign-in, which works without JavaScript): a cookie for
        the page, and the same address without the token."""
        if await run_in_threadpool(self.keyring.grant, offered) is None:
            await refuse(send, scope["path"], 401, "that token is not this server's")
            return
        rest = urlencode({k: v for k, v in query.items() if k != "token"}, doseq=True)
        location = scope["path"] + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={offered}; HttpOnly; SameSite=Strict; Path=/"
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1")),
                                (b"set-cookie", cookie.encode("latin-1")),
                                (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def _token_shown(headers: dict[str, str]) -> str | None:
    """The bearer token of the Authorization header, else of the page's cookie."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header is no token
        return None
    return cookie[COOKIE].value if COOKIE in cookie else None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None past `limit` bytes (what was read is dropped)."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _with_safe_headers(send: Send) -> Send:
    """`send` with SAFE_HEADERS added to the answer's start, where a route set none."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            headers += [(k, v) for k, v in SAFE_HEADERS if k not in present]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then whatever comes: a disconnect

    return again


SIGN_IN = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>dreamd: sign in</title></head><body style="font-family: sans-serif; margin: 3em">
<h1>dreamd</h1><p>{message}</p><form method="get" action="{path}">
<label>Token <input type="password" name="token" autocomplete="current-password"></label>
<button type="submit">Open</button></form></body></html>"""


async def refuse(send: Send, path: str, status: int, message: str,
                 extra: dict[str, str] | None = None) -> None:
    if is_page(path):
        body = SIGN_IN.format(message=html.escape(message), path=html.escape(path)).encode()
        kind = b"text/html; charset=utf-8"
        extra = {"content-security-policy": PAGE_POLICY, **(extra or {})}
    else:
        body = json.dumps({"error": message}).encode()
        kind = b"application/json"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

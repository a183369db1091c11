"""Starting the server: the token, the listening socket, uvicorn; and `dreamd mcp` on
stdio. Every refusal is one line (ConfigError, StoreError) before anything listens."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

from dreamd.backends.credentials import secret
from dreamd.config import Config
from dreamd.errors import ConfigError
from dreamd.logger import Logger
from dreamd.memory import tokens
from dreamd.memory.tokens import Grant
from dreamd.serve import mcp
from dreamd.serve.guard import is_loopback
from dreamd.serve.keyring import Keyring
from dreamd.serve.memories import Memories

TOKEN_VARIABLE = "DREAMD_API_TOKEN"


def token_of(config: Config) -> str | None:
    """The bearer token: $DREAMD_API_TOKEN, else `serve.token_file`, else the systemd
    credential `serve.credential`. Beyond loopback there must be one."""
    token = secret(TOKEN_VARIABLE, config.serve.credential, config.serve.token_file)
    if config.serve.token_file and token is None:
        raise ConfigError(f"serve.token_file {config.serve.token_file!r} is missing or empty")
    if token is None and not is_loopback(config.serve.host):
        raise ConfigError(f"serve.host {config.serve.host!r} is beyond this machine, and no "
                          f"API token is set: set {TOKEN_VARIABLE}, serve.token_file or the "
                          f"credential {config.serve.credential!r} (see docs/how-to/http.md)")
    if token is not None and len(token) < 16:
        raise ConfigError("the API token is shorter than 16 characters: too easy to guess")
    return token


def keyring_of(memories: Memories, token: str | None) -> Keyring:
    """The operator's token and the store's issued ones. Issued tokens without an
    operator's would be a lock on an open door (the server asks for no token then):
    refused in one line."""
    with memories.memory() as memory:
        if token is None and tokens.live(memory.store):
            raise ConfigError(f"the store holds API tokens (dreamd tokens list), but no "
                              f"operator token is set: set {TOKEN_VARIABLE}, "
                              "serve.token_file or the credential, or revoke them")

    def check(offered: str) -> Grant | None:
        with memories.memory() as memory:
            return tokens.check(memory.store, offered)

    return Keyring(token, check)


def listening(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named as TCP: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say so, and
    # with it on, a kept-alive connection's every answer waited 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(config: Config, log: Logger, *, create: bool = False) -> int:
    import uvicorn

    from dreamd.serve.app import build

    token = token_of(config)
    sock = listening(config.serve.host, config.serve.port)
    memories = Memories(config, size=config.serve.connections, create=create)
    try:
        keyring = keyring_of(memories, token)
        tools = mcp.make(memories, config)
        http = tools.streamable_http_app(streamable_http_path="/mcp", host=config.serve.host,
                                         stateless_http=True)

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            async with tools.session_manager.run():
                yield

        app = build(config, memories, keyring=keyring, log=log, mcp_routes=list(http.routes),
                    lifespan=lifespan)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        # One line for whoever started it (the port, when 0 asked for any free one).
        print(f"dreamd serve: http://{shown}:{port}/ (API /v1, OpenAPI /openapi.json, "
              f"MCP /mcp, metrics /metrics)" + ("" if token else "; no API token: "
              "loopback only"), file=sys.stderr, flush=True)
        server = _server()(uvicorn.Config(app, log_level="warning", access_log=False,
                                               lifespan="on", server_header=False))
        server.run(sockets=[sock])
    finally:
        memories.close()
        sock.close()
    return 0


def _server() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn, except that SIGTERM and SIGINT end it with exit 0 after a graceful
        shutdown (uvicorn raises the signal again once done, and systemd, the tests and a
        shell would see a process killed by it)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {s: signal.signal(s, self.handle_exit) for s in STOPPING}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    return Server


STOPPING = (signal.SIGINT, signal.SIGTERM)


def serve_stdio(config: Config) -> int:
    """`dreamd mcp`: the MCP tools over stdin and stdout (stdout is the protocol's)."""
    memories = Memories(config, size=1)
    try:
        mcp.make(memories, config).run("stdio")
    finally:
        memories.close()
    return 0

"""`dreamd serve` and `dreamd mcp`: memory over HTTP and MCP (see dreamd/serve)."""

from __future__ import annotations

import sys
from typing import Any

import click

from dreamd import config as cfg
from dreamd.cli.boundary import fail, file_options, load_config
from dreamd.runtime import log as logging_


def _server_config(obj: dict[str, Any], host: str | None, port: int | None) -> cfg.Config:
    import dataclasses

    config = load_config(obj)
    try:  # the server's libraries are an extra: say so in one line
        import fastapi  # noqa: F401
        import mcp  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise fail(f"the server needs libraries that are not installed ({exc.name}): "
                   "pip install 'dreamd[serve]'") from None
    serve = config.serve
    if host is not None:
        serve = dataclasses.replace(serve, host=host)
    if port is not None:
        serve = dataclasses.replace(serve, port=port)
    return dataclasses.replace(config, serve=serve)


@click.command()
@click.option("--host", help="Address to listen on (default serve.host: 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535),
              help="Port (default serve.port: 8765; 0 picks a free one).")
@click.option("--create", is_flag=True, help="Start a new memory file if there is none.")
@file_options
@click.pass_obj
def serve(obj: dict[str, Any], host: str | None, port: int | None, create: bool) -> None:
    """Serve memory over HTTP: the JSON API under /v1 (OpenAPI at /openapi.json), MCP at
    /mcp, Prometheus metrics at /metrics, and a page at / to look inside.

    The bearer token comes from $DREAMD_API_TOKEN, serve.token_file or the systemd
    credential; without one the server listens on loopback only.

    \b
    Example:
      DREAMD_API_TOKEN=$(cat ~/.config/dreamd/token) dreamd --db ~/chat/memory.db serve
    """
    from dreamd.serve.run import serve as run_server

    config = _server_config(obj, host, port)
    logging_.configure(config.log.level, config.log.format)
    sys.exit(run_server(config, logging_.get_logger(), create=create))


@click.command()
@file_options
@click.pass_obj
def mcp(obj: dict[str, Any]) -> None:
    """Serve the memory tools over MCP on stdin/stdout (for an MCP client's config):
    recall, context, remember, memory (and forget when serve.mcp_forget is true).

    \b
    Example:
      dreamd --db ~/chat/memory.db mcp
    """
    from dreamd.serve.run import serve_stdio

    config = _server_config(obj, None, None)
    logging_.configure("warning", config.log.format)  # stderr: stdout is the protocol's
    sys.exit(serve_stdio(config))

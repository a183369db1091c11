"""The command line: commands, rendering and the status report."""

from dreamd.cli import checking, serving  # noqa: F401 (register check-llm, serve, mcp)
from dreamd.cli.commands import main

__all__ = ["main"]

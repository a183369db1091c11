"""The command line: commands, rendering and the status report."""

from dreamd.cli import checking, facts, serving  # noqa: F401 (register check-llm, facts, serve, mcp)
from dreamd.cli.commands import main

__all__ = ["main"]

"""The command line: commands, rendering and the status report."""

from dreamd.cli import serving  # noqa: F401 (registers serve and mcp on main)
from dreamd.cli.commands import main

__all__ = ["main"]

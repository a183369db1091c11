"""The command line: commands, rendering and the status report."""

from dreamd.cli.commands import main

__all__ = ["main"]

"""The command line: commands, rendering and the status report."""

# Imported to register their commands: check-llm; facts; serve and mcp; tokens.
from dreamd.cli import checking, facts, serving, tokens  # noqa: F401
from dreamd.cli.commands import main

__all__ = ["main"]

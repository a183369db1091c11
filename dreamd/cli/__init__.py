"""The command line: commands, rendering and the status report."""

from dreamd.cli import checking, facts, serving, tokens
from dreamd.cli.commands import main

# The commands that live in modules of their own, added to the group here: no module
# adds itself by being imported.
for _command in (checking.check_llm, serving.serve, serving.mcp, tokens.tokens, facts.facts):
    main.add_command(_command)

__all__ = ["main"]

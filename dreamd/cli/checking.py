"""`dreamd check-llm`: will the configured model give usable memory? (see dream/probe)"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from dreamd.cli.boundary import fail, file_options, load_config
from dreamd.errors import EXIT_JOB_FAILED


@click.command("check-llm")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def check_llm(obj: dict[str, Any], as_json: bool) -> None:
    """Probe the configured server and model: reachable, the model's context window,
    JSON schema support, and one sample summary and fact extraction through the checks
    every answer meets before it is stored. Writes nothing.

    Exit 0: usable; 1: not usable as configured (the lines say what to change); 69: the
    server cannot be reached.

    \b
    Example:
      dreamd --config ~/.config/dreamd/dreamd.toml check-llm
    """
    from dreamd.cli.demo import sample_sessions
    from dreamd.dream.probe import as_dict, probe, verdict

    config = load_config(obj)
    if config.completer.backend != "openai":
        raise fail("completer.backend is extractive: there is no model to check (set "
                   "completer.backend = \"openai\" and its base_url and model)")
    found = probe(config, list(sample_sessions()[0].turns))  # a shipped conversation
    usable, summary = verdict(found, config.jobs.fallback)
    if as_json:
        click.echo(json.dumps({"usable": usable, "verdict": summary,
                               "checks": as_dict(found)}, indent=2))
    else:
        marks = {True: "ok  ", False: "FAIL", None: "note"}
        for f in found:
            took = f" ({f.seconds:g} s)" if f.seconds else ""
            click.echo(f"{marks[f.ok]} {f.check:<8} {f.said}{took}")
            if f.fix:
                click.echo(f"              -> {f.fix}")
        click.echo(summary)
    sys.exit(0 if usable else EXIT_JOB_FAILED)

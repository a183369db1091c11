"""`dreamd facts`: list a user's facts, and a person's word on one (correct, retract, pin,
unpin, add, history, revert), through the library (dreamd.memory.corrections)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import click

from dreamd.cli.boundary import file_options, load_config
from dreamd.models import Correction, Fact
from dreamd.runtime import log as logging_


def _memory(obj: dict[str, Any], read_only: bool) -> Any:
    from dreamd.memory.api import Memory

    config = load_config(obj)
    logging_.configure("warning", config.log.format)
    return Memory(config.store_url or config.db_path, config=config, create=False,
                  read_only=read_only)


def _with_memory(obj: dict[str, Any], read_only: bool, call: Callable[[Any, str], Any],
                 user: str | None) -> Any:
    memory = _memory(obj, read_only)
    try:
        return call(memory, user or memory.config.user.id)
    finally:
        memory.close()


def fact_line(fact: Fact) -> str:
    """`#12 v2 pinned: Sam lives in Braga (home, since 2024-03-01) [person:app]`."""
    marks = [f"v{fact.version}"] + (["pinned"] if fact.pinned else []) + (
        [fact.withdrawn] if fact.withdrawn else []) + (
        [f"replaced by #{fact.replaced_by}"] if fact.replaced_by and not fact.withdrawn else [])
    about = ", ".join(x for x in (fact.about, f"since {fact.valid_from}"
                                  if fact.valid_from else "") if x)
    return (f"#{fact.id} {' '.join(marks)}: {fact.statement}" + (f" ({about})" if about else "")
            + (f" [{fact.origin}]" if fact.origin else ""))


def correction_line(c: Correction) -> str:
    what = {"correct": f"{c.old!r} -> {c.new!r} (fact #{c.new_fact})",
            "retract": repr(c.old), "add": f"{c.new!r} (fact #{c.new_fact})",
            "revert": f"correction #{c.reverts}"}.get(c.action, "")
    undone = f"; reverted by #{c.reverted_by}" if c.reverted_by else ""
    why = f"; why: {c.why}" if c.why else ""
    return (f"#{c.id} {c.made_at} {c.made_by} {c.action} fact #{c.fact_id}"
            + (f": {what}" if what else "") + why + undone)


def _echo(rows: list[Any], as_json: bool, line: Callable[[Any], str]) -> None:
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        for row in rows:
            click.echo(line(row))


_user = click.option("--user", help="Whose facts (default: user.id from the config).")
_who = click.option("--by", default="person", show_default=True,
                    help="Who speaks: a person, an app, an agent's token's name.")
_why = click.option("--why", help="Why, in a few words (kept with the correction).")
_version = click.option("--version", "expected_version", type=click.IntRange(1),
                        help="The fact's version as you read it: refused if it changed since.")


@click.group(invoke_without_command=True)
@_user
@click.option("--all", "everything", is_flag=True,
              help="Replaced and withdrawn facts too (history).")
@click.option("--after", "after_id", default=0, type=click.IntRange(0),
              help="Only facts with ids above this one (the last id of the page before).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_context
def facts(ctx: click.Context, user: str | None, everything: bool, after_id: int, limit: int,
          as_json: bool) -> None:
    """A user's facts with their ids and versions; the subcommands give a person's word
    on one (an unknown id, or another user's, is exit 2).

    \b
    Examples:
      dreamd --db ~/chat/memory.db facts --user alice
      dreamd --db ~/chat/memory.db facts retract 12 --user alice --why "never said that"
      dreamd --db ~/chat/memory.db facts correct 14 "Alice lives in Braga" --user alice
      dreamd --db ~/chat/memory.db facts pin 9 --user alice
      dreamd --db ~/chat/memory.db facts history 14 --user alice
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = _with_memory(ctx.obj, True, lambda m, u: m.facts(
        u, after_id=after_id, limit=limit, history=everything), user)
    _echo(rows, as_json, fact_line)


@facts.command()
@click.argument("fact_id", type=int)
@click.argument("statement")
@_user
@_who
@_why
@_version
@file_options
@click.pass_obj
def correct(obj: dict[str, Any], fact_id: int, statement: str, user: str | None, by: str,
            why: str | None, expected_version: int | None) -> None:
    """New words for a fact; the old ones are kept as history.

    \b
    Example:
      dreamd --db ~/chat/memory.db facts correct 14 "Sam lives in Braga" --why "moved"
    """
    fact = _with_memory(obj, False, lambda m, u: m.correct(
        u, fact_id, statement, by=by, why=why, expected_version=expected_version), user)
    click.echo(f"corrected #{fact_id}: now {fact_line(fact)}")


@facts.command()
@click.argument("fact_id", type=int)
@_user
@_who
@_why
@_version
@file_options
@click.pass_obj
def retract(obj: dict[str, Any], fact_id: int, user: str | None, by: str, why: str | None,
            expected_version: int | None) -> None:
    """The fact is wrong: it leaves every tier and the context block, and is not made
    again from the same turns.

    \b
    Example:
      dreamd --db ~/chat/memory.db facts retract 12 --why "that was my brother"
    """
    fact = _with_memory(obj, False, lambda m, u: m.retract(
        u, fact_id, by=by, why=why, expected_version=expected_version), user)
    click.echo(f"retracted {fact_line(fact)}")


def _pin_command(name: str, pinned: bool, doc: str) -> None:
    @facts.command(name=name, help=doc)
    @click.argument("fact_id", type=int)
    @_user
    @_who
    @_why
    @_version
    @file_options
    @click.pass_obj
    def command(obj: dict[str, Any], fact_id: int, user: str | None, by: str,
                why: str | None, expected_version: int | None) -> None:
        fact = _with_memory(obj, False, lambda m, u: (m.pin if pinned else m.unpin)(
            u, fact_id, by=by, why=why, expected_version=expected_version), user)
        click.echo(f"{name}ned {fact_line(fact)}")


_pin_command("pin", True, "Keep the fact in the profile and the context block whatever the "
             "ranking.\n\n\b\nExample:\n  dreamd --db ~/chat/memory.db facts pin 9")
_pin_command("unpin", False, "Let the ranking decide again.\n\n\b\nExample:\n"
             "  dreamd --db ~/chat/memory.db facts unpin 9")


@facts.command()
@click.argument("statement")
@click.option("--subject", help="Whom it is about (default: the user, by name).")
@click.option("--about", type=click.Choice(["job", "home", "partner"]),
              help="A thing a person has one of at a time: a newer one replaces it.")
@_user
@_who
@_why
@file_options
@click.pass_obj
def add(obj: dict[str, Any], statement: str, subject: str | None, about: str | None,
        user: str | None, by: str, why: str | None) -> None:
    """A fact the person states directly, with no turn behind it.

    \b
    Example:
      dreamd --db ~/chat/memory.db facts add "Sam is allergic to peanuts" --user sam
    """
    fact = _with_memory(obj, False, lambda m, u: m.add_fact(
        u, statement, subject=subject, about=about, by=by, why=why), user)
    click.echo(f"added {fact_line(fact)}")


@facts.command()
@click.argument("fact_id", type=int)
@_user
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def history(obj: dict[str, Any], fact_id: int, user: str | None, as_json: bool) -> None:
    """Every correction of a fact (and of the facts it was corrected into or from).

    \b
    Example:
      dreamd --db ~/chat/memory.db facts history 14 --json
    """
    rows = _with_memory(obj, True, lambda m, u: m.history(u, fact_id), user)
    _echo(rows, as_json, correction_line)
    if not rows and not as_json:
        click.echo(f"no correction of fact #{fact_id} yet")


@facts.command()
@click.argument("correction_id", type=int)
@_user
@_who
@_why
@file_options
@click.pass_obj
def revert(obj: dict[str, Any], correction_id: int, user: str | None, by: str,
           why: str | None) -> None:
    """Undo one correction (its id is in `facts history`).

    \b
    Example:
      dreamd --db ~/chat/memory.db facts revert 3 --why "I was wrong"
    """
    row = _with_memory(obj, False, lambda m, u: m.revert(u, correction_id, by=by, why=why),
                       user)
    click.echo(f"reverted: {correction_line(row)}")

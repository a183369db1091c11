"""`dreamd tokens`: API tokens limited to some users and scopes, for `dreamd serve`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from dreamd.cli.boundary import fail, file_options, read_existing
from dreamd.memory import tokens as tokens_


@click.group()
def tokens() -> None:
    """API tokens for `dreamd serve`, each limited to some users and to read, write
    (turns) or erase. The operator's token ($DREAMD_API_TOKEN) opens everything; give an
    app's agent or one tenant's backend a token of its own instead.

    \b
    Example:
      dreamd --db ~/chat/memory.db tokens add --user alice --scope read --name agent
    """


@tokens.command("add")
@click.option("--user", "users", multiple=True, metavar="USER",
              help="A user the token may reach (repeat for more).")
@click.option("--all-users", is_flag=True, help="Every user (and the views of all: the "
              "list of users, status, metrics, the page's index).")
@click.option("--scope", "scopes", multiple=True, type=click.Choice(tokens_.SCOPES),
              help="What it may do (repeat for more; default: read).")
@click.option("--name", default="token", show_default=True,
              help="A name to know it by in `tokens list` and the logs.")
@file_options
@click.pass_obj
def add(obj: dict[str, Any], users: tuple[str, ...], all_users: bool,
        scopes: tuple[str, ...], name: str) -> None:
    """Issue a token and print it once (only a slow hash of it is stored).

    \b
    Example:
      dreamd --db ~/chat/memory.db tokens add --user alice --scope read --scope write
    """
    if all_users == bool(users):
        raise fail("name the users a token may reach (--user U, repeated) or --all-users")
    reach = None if all_users else tuple(dict.fromkeys(users))
    token_id, token = read_existing(obj, lambda store, config: tokens_.issue(
        store, name, reach, scopes or ("read",), datetime.now(UTC)), read_only=False)
    click.echo(token)
    click.echo(f"token {token_id} ({name}): shown once; `dreamd serve` takes it once an "
               "operator token is set", err=True)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def listing(obj: dict[str, Any], as_json: bool) -> None:
    """The tokens issued: id, name, users, scopes, when made and revoked (never a token).

    \b
    Example:
      dreamd --db ~/chat/memory.db tokens list
    """
    rows = read_existing(obj, lambda store, config: tokens_.listing(store))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        reach = "every user" if r["users"] is None else ", ".join(r["users"])
        state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "live"
        click.echo(f"{r['id']}: {r['name']}: {'+'.join(r['scopes'])} on {reach} "
                   f"(made {r['created_at']}, {state})")
    if not rows:
        click.echo("no tokens yet")


@tokens.command("revoke")
@click.argument("token_id", metavar="ID", type=click.IntRange(1))
@file_options
@click.pass_obj
def revoke(obj: dict[str, Any], token_id: int) -> None:
    """Revoke a token: a running server refuses it within seconds.

    \b
    Example:
      dreamd --db ~/chat/memory.db tokens revoke 3
    """
    read_existing(obj, lambda store, config: tokens_.revoke(store, token_id,
                                                              datetime.now(UTC)),
                  read_only=False)
    click.echo(f"token {token_id} revoked")

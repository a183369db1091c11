"""The command line: parse, load config, call one library function, print the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from dreamd import config as cfg
from dreamd.cli.boundary import (
    Dreamd,
    Progress,
    fail,
    file_options,
    finite,
    load_config,
    open_memory,
    plural,
    read_existing,
)
from dreamd.errors import ConfigError
from dreamd.runtime import log as logging_


def dream(obj: dict[str, Any], config: cfg.Config, *, force: bool, loop: float | None,
          create: bool) -> int:
    from dreamd.runtime.daemon import Daemon, run_force
    from dreamd.runtime.heap import large_blocks_unmapped
    from dreamd.runtime.priority import background, one_blas_thread

    log = logging_.get_logger()
    if force or not config.pass_.own_process:  # else each pass's own process does this
        log.debug("blas", threads=one_blas_thread())
        log.debug("heap", large_blocks_unmapped=large_blocks_unmapped())
    if config.pass_.background:  # the process's own choice, before its threads start
        log.debug("priority", **background())
    if force and sys.stderr.isatty():
        progress = Progress(sys.stderr)
        unregister = logging_.before_each_line(progress.clear)
        try:
            return run_force(config, log, progress, create=create)
        finally:
            unregister()
            progress.clear()
    if force:
        return run_force(config, log, logging_.LoggedProgress(log), create=create)
    daemon = Daemon(config, log, config_path=obj.get("config"), db_flag=obj.get("db"),
                    fixed_interval=loop, create=create)
    return daemon.run()


@click.group(cls=Dreamd, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db", metavar="PATH", help="The memory file (default from config).")
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="A TOML config file (see config.example.toml).")
@click.option("--force", is_flag=True, help="One pass running every job that has work, then exit.")
@click.option("--loop", "loop", type=click.FloatRange(min=0.05, max=1e9), metavar="SECONDS",
              callback=lambda ctx, param, value: finite(value, "--loop"),
              help="A pass every SECONDS until SIGINT/SIGTERM (instead of the adaptive "
              "schedule).")
@click.option("--create", is_flag=True, help="Start a new memory file if there is none at "
              "the path (otherwise a missing file is an error: a typo must not dream on an "
              "empty file).")
@click.version_option(package_name="dreamd")
@click.pass_context
def main(ctx: click.Context, db: str | None, config_path: str | None, force: bool,
         loop: float | None, create: bool) -> None:
    """Consolidate a chat app's memory file: gists, profile, eras, narrative, self-state.

    Without --force or --loop, dreamd runs as a daemon: a pass at start, then passes on an
    adaptive schedule (config [schedule]) until SIGTERM/SIGINT; SIGHUP reloads config.

    \b
    Examples:
      dreamd --db ~/chat/memory.db             the daemon (under systemd: docs/how-to/systemd.md)
      dreamd --db ~/chat/memory.db --force     one pass, every job with work, then exit
      dreamd --db ~/chat/memory.db --loop 600  a pass every ten minutes (tmux)
      dreamd --db ~/chat/memory.db status      backlog, drives, why jobs ran or did not
      dreamd --db ~/chat/memory.db show        the memory dreamd produced
      dreamd --db ~/chat/memory.db import chatgpt conversations.json
      dreamd --db ~/chat/memory.db recall "what is my dog called?"
      dreamd --db ~/chat/memory.db context session-42 --budget 1500

    Exit codes: 0 done; 1 a job failed (see `dreamd status`); 2 bad input or config;
    3 another dreamd is already working on the file; 4 the file stayed locked by another
    process past the busy timeout; 70 a bug in dreamd.
    """
    ctx.ensure_object(dict)
    ctx.obj.update({"db": db, "config": config_path})
    if ctx.invoked_subcommand is not None:
        if force or loop is not None or create:
            raise fail("--force, --loop and --create run passes; they do not go with a "
                       "subcommand")
        return
    if force and loop is not None:
        raise fail("choose one of --force and --loop")
    config = load_config(ctx.obj)
    # Pass logs go to stdout (journald under systemd); status output keeps stdout clean.
    logging_.configure(config.log.level, config.log.format, stream=sys.stdout)
    ctx.exit(dream(ctx.obj, config, force=force, loop=loop, create=create))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="How many recent passes to show.")
@file_options
@click.pass_obj
def status(obj: dict[str, Any], as_json: bool, runs: int) -> None:
    """Backlog, drives, the last passes and why each job did or did not run.

    \b
    Example:
      dreamd --db ~/chat/memory.db status --runs 3
    """
    from datetime import UTC, datetime

    from dreamd import report
    from dreamd.cli.render import render_before_first_pass, render_status
    from dreamd.dream.factory import embedder_model_name
    from dreamd.errors import NotMigrated

    try:
        data = read_existing(obj, lambda store, config: report.status(
            store, config, embedder_model_name(config), datetime.now(UTC), runs))
    except NotMigrated:  # a file dreamd has not run on: what waits for it is still news
        data = read_existing(obj, lambda store, config: report.before_first_pass(store),
                             read_only=True, current=False)
        click.echo(json.dumps(data, indent=2) if as_json else render_before_first_pass(data))
        return
    click.echo(json.dumps(data, indent=2, default=str) if as_json else render_status(data))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--gists", default=5, show_default=True, type=click.IntRange(0, 100000),
              help="How many of the latest gists to print.")
@click.option("--user", help="Whose memory (default: user.id from the config).")
@file_options
@click.pass_obj
def show(obj: dict[str, Any], as_json: bool, gists: int, user: str | None) -> None:
    """Print the memory dreamd produced: gists, profile, eras, narrative, self-state.

    \b
    Example:
      dreamd --db ~/chat/memory.db show --gists 3
    """
    from dreamd import report
    from dreamd.cli.render import render_memory

    data = read_existing(obj, lambda store, config: report.memory(store, config, gists, user))
    click.echo(json.dumps(data, indent=2) if as_json else render_memory(data))


@main.command()
@click.argument("query")
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="How many turns.")
@click.option("--session", help="Only this session.")
@click.option("--user", "users", multiple=True,
              help="Whose turns (repeatable; default: user.id from the config).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def recall(obj: dict[str, Any], query: str, k: int, session: str | None,
           users: tuple[str, ...], as_json: bool) -> None:
    """The turns most relevant to QUERY, among one user's sessions: vector similarity
    fused with BM25.

    \b
    Example:
      dreamd --db ~/chat/memory.db recall "what is my dog called?" -k 5
    """
    from dreamd.memory.users import require_user

    memory = open_memory(obj)
    try:
        with memory.store.read() as conn:
            for name in users or (memory.config.user.id,):
                require_user(conn, name)
        hits = memory.recall(query, k=k, session=session, users=list(users) or None)
    finally:
        memory.close()
    if as_json:
        click.echo(json.dumps([{**h.__dict__, "when": h.when, "dated": h.dated} for h in hits],
                              indent=2))
        return
    for h in hits:
        click.echo(f"{h.score:6.2f}  {h.when}  {h.session_id}  {h.role}: {h.dated}")


@main.command()
@click.argument("session")
@click.option("--query", help="What the context should be relevant to (default: the "
              "session's last user turn).")
@click.option("--budget", default=1000, show_default=True, type=click.IntRange(0, 1_000_000),
              help="Tokens the block may use.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def context(obj: dict[str, Any], session: str, query: str | None, budget: int,
            as_json: bool) -> None:
    """The tiered context block for SESSION, within a token budget.

    \b
    Example:
      dreamd --db ~/chat/memory.db context session-42 --budget 1500
    """
    memory = open_memory(obj)
    try:
        block = memory.context(session, query=query, budget=budget)
    finally:
        memory.close()
    if as_json:
        click.echo(json.dumps({"tokens": block.tokens, "text": block.text,
                               "sections": dict(block.sections)}, indent=2))
    else:
        click.echo(block.text)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def users(obj: dict[str, Any], as_json: bool) -> None:
    """The users this memory file holds: sessions, turns, and turns not yet in a gist.

    \b
    Example:
      dreamd --db ~/chat/memory.db users
    """
    from dreamd.memory import users as users_

    data = read_existing(obj, lambda store, config: users_.users(store))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for user, t in data["users"].items():
        click.echo(f"{user}: {t['sessions']} sessions, {t['turns']} turns, "
                   f"{t['backlog']} not yet in a gist")
    if not data["users"]:
        click.echo("no users yet")
    if data["uncounted_turns"]:
        click.echo(f"(and {data['uncounted_turns']} newer turns the next pass will count)")


@main.command()
@click.option("--user", help="Only this user's sessions.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def sessions(obj: dict[str, Any], user: str | None, as_json: bool) -> None:
    """The sessions this memory file holds, newest first per user, with their backlog.

    \b
    Example:
      dreamd --db ~/chat/memory.db sessions --user alice
    """
    from dreamd.memory import users as users_

    data = read_existing(obj, lambda store, config: users_.sessions(store, user))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for row in data["sessions"]:
        click.echo(f"{row['session_id']}  {row['user_id']}  {row['turns']} turns, "
                   f"{row['unsummarized']} not yet in a gist, last {row['last_at'] or '-'}")
    if data["uncounted_turns"]:
        click.echo(f"(and {data['uncounted_turns']} newer turns the next pass will count)")


@main.command()
@click.argument("job", required=False)
@click.argument("item", required=False)
@click.option("--fallback", is_flag=True, help="Instead: send every gist the extractive "
              "fallback made back to the model at the next pass (after a model change).")
@file_options
@click.pass_obj
def retry(obj: dict[str, Any], job: str | None, item: str | None, fallback: bool) -> None:
    """Release quarantined and backing-off items (all, one JOB's, or one ITEM of it): the
    next pass tries them again. With --fallback, the gists the fallback made go back to
    the model now rather than after jobs.fallback_retry_hours.

    \b
    Examples:
      dreamd --db ~/chat/memory.db retry                 everything that failed
      dreamd --db ~/chat/memory.db retry profile         the profile job's items
      dreamd --db ~/chat/memory.db retry summarize s-42  one session's gist
      dreamd --db ~/chat/memory.db retry --fallback      after switching to a better model
    """
    from dreamd.dream.jobs.registry import JOBS
    from dreamd.store.fallback import send_back
    from dreamd.store.runs import release_failures

    if fallback and job is not None:
        raise fail("--fallback sends back every fallback gist: give it no JOB or ITEM")
    if job is not None and job not in JOBS.names:
        raise fail(f"no job {job!r}; the jobs are {', '.join(JOBS.names)}")

    def back(store: Any, config: Any) -> int:
        with store.write(alone=True) as conn:  # every user's: no worker writes meanwhile
            return send_back(conn, "9999")  # made before any time: every one

    if fallback:
        sent = read_existing(obj, back, read_only=False)
        if not sent:
            raise fail("no fallback gist is waiting for the model (none was made, or all "
                       "go back at the next pass already)")
        click.echo(f"{plural(sent, 'gist')} the fallback made "
                   f"{'goes' if sent == 1 else 'go'} back to the model at the next pass")
        return

    def release(store: Any, config: Any) -> int:
        with store.write() as conn:
            return int(release_failures(conn, job, item))

    released = read_existing(obj, release, read_only=False)
    what = f"job {job!r}" + (f" item {item!r}" if item else "") if job else "every job"
    if not released:
        raise fail(f"nothing of {what} is quarantined or backing off")
    click.echo(f"released {plural(released, 'item')} of {what}; the next pass tries again")


@main.command(name="import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(
    ["chatgpt", "claude", "openwebui", "jsonl", "locomo", "longmemeval"]))
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--user", default=None, help="Whose history this is (default: user.id from "
              "the config); new sessions are filed under this user.")
@file_options
@click.pass_obj
def import_(obj: dict[str, Any], fmt: str, path: Path, user: str | None) -> None:
    """Add history from a file to the memory file, with its real dates.

    \b
    FORMAT is one of:
      chatgpt      conversations.json from a ChatGPT data export (the branch last shown)
      claude       conversations.json from a Claude data export
      openwebui    the file Open WebUI's "Export All Chats" writes (the branch last shown)
      jsonl        one turn per line: {"session", "role", "content", "created_at", "name"?}
      locomo       the LoCoMo benchmark file
      longmemeval  a LongMemEval file (each haystack session once)

    A re-import adds nothing; a malformed file imports nothing and names the place.

    \b
    Example:
      dreamd --db ~/chat/memory.db import chatgpt ~/Downloads/conversations.json
    """
    from dreamd.memory.importers import read_sessions, write_sessions
    from dreamd.store.opening import open_store

    config = load_config(obj)
    logging_.configure("warning", config.log.format)
    progress = Progress(sys.stderr)
    sessions = read_sessions(fmt, path)
    store = open_store(config)
    try:
        result = write_sessions(store, sessions,
                                lambda done, total: progress("import", done, total),
                                user=user or config.user.id)
    finally:
        progress.clear()
        store.close()
    click.echo(f"{path}: {plural(result.sessions, 'session')} ({result.new_sessions} new), "
               f"{plural(result.turns_added, 'turn')} added, {result.turns_present} already "
               "present")
    for why in result.left_out:
        click.echo(f"left out {why}")


@main.command()
@click.option("--replace", is_flag=True, help="Overwrite a demo file made earlier (only a "
              "file the demo made itself, never another memory file).")
@file_options
@click.pass_obj
def demo(obj: dict[str, Any], replace: bool) -> None:
    """Write the shipped sample conversations into a new memory file, as a chat app would.

    \b
    Example:
      dreamd --db demo/memory.db demo && dreamd --db demo/memory.db --force
    """
    from dreamd.cli.demo import build_demo

    config = load_config(obj)
    if config.store_url is not None:
        raise ConfigError("demo writes a SQLite file as a chat app would; --db names a "
                              "PostgreSQL database (give it a file path)")
    path = Path(config.db_path)
    count = build_demo(path, replace=replace, default=config.db == cfg.DEFAULT_DB)
    click.echo(f"wrote {count} turns of sample conversations to {path}")


@main.command()
@click.option("--user", required=True, help="Whose turns to forget.")
@click.option("--session", help="Only this session of the user.")
@click.option("--before", help="Only turns made before this date or ISO timestamp (UTC).")
@click.option("--dry-run", is_flag=True, help="Show what would go; change nothing.")
@click.option("--vacuum", is_flag=True, help="Also rewrite the whole file (VACUUM) afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@file_options
@click.pass_obj
def forget(obj: dict[str, Any], user: str, session: str | None, before: str | None,
           dry_run: bool, vacuum: bool, as_json: bool) -> None:
    """Erase a user's turns (all, one session, or those before a date) and everything
    dreamd built from them; the next pass re-derives what remains.

    Deleted text is overwritten (secure_delete), the search index is merged, and the WAL
    is checkpointed and emptied when no other connection is reading.

    \b
    Example:
      dreamd --db ~/chat/memory.db forget --user alice --before 2025-01-01 --dry-run
    """
    from dreamd.memory.forget import Scope, parse_before
    from dreamd.memory.forget import forget as forget_scope

    scope = Scope(user, session, parse_before(before) if before is not None else None)
    result = read_existing(obj, lambda store, config: forget_scope(
        store, scope, config.agent.id, dry_run=dry_run, vacuum=vacuum), read_only=dry_run)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    verb = "would forget" if dry_run else "forgot"
    click.echo(f"{verb} {result.turns} turns of {scope.describe()}: "
               f"{len(result.sessions_emptied)} sessions emptied, "
               f"{len(result.sessions_trimmed)} trimmed, {result.gists} gists")
    if result.derived:
        click.echo(("would drop: " if dry_run else "dropped: ") + ", ".join(result.derived))
    if not dry_run and load_config(obj).store_url is not None:
        click.echo("the erased rows' old images stay in PostgreSQL's write-ahead log until "
                   "the server recycles its segments" + (
                       "" if vacuum else "; --vacuum frees their space in the tables"))
    elif not dry_run:
        click.echo("WAL emptied" if result.wal_truncated else
                   "WAL still in use by another connection: its old pages go at SQLite's "
                   "next WAL reset (run forget again when the chat app is idle to force it)")


@main.command()
@click.option("--user", required=True, help="Whose memory to export.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (default: stdout).")
@file_options
@click.pass_obj
def export(obj: dict[str, Any], user: str, output: Path | None) -> None:
    """Everything stored about a user as one JSON document: turns, gists, profile, eras,
    narrative, reflection, each derived row with the turns it came from.

    \b
    Example:
      dreamd --db ~/chat/memory.db export --user alice -o alice.json
    """
    from dreamd.memory.export import dumps, export_user

    document = read_existing(obj, lambda store, config: export_user(store, user,
                                                                   config.agent.id))
    text = dumps(document)
    if output is None:
        click.echo(text, nl=False)
        return
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as exc:
        raise fail(f"{output}: cannot write: {exc.strerror}") from None
    click.echo(f"{output}: {len(document['sessions'])} sessions, "
               f"{sum(len(s['turns']) for s in document['sessions'])} turns, "
               f"{len(document['gists'])} gists, {len(document['eras'])} eras")


"""Plain-text rendering of status and memory for a terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dreamd.report import diary_lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _drives(drives: dict[str, float] | None) -> str:
    if not drives:
        return "-"
    return "  ".join(f"{k} {v:.2f}" for k, v in drives.items())


def _store_lines(data: dict[str, Any]) -> tuple[str, str]:
    """Where memory lives, and the engine that keeps it: the report files what the engine
    says of itself under the engine's name (`Store.engine`), each shown its own way."""
    section = next(name for name in _ENGINE_LINES if name in data)
    where, line = _ENGINE_LINES[section]
    return f"{where:<13}{data['db']}", line(data[section])


def _sqlite_line(sqlite: dict[str, Any]) -> str:
    """The SQLite dreamd runs, and what it knows of the app's (the system's library)."""
    line = f"sqlite       {sqlite['version']} ({sqlite.get('library', 'bundled')})"
    if sqlite["wal_reset_bug"]:
        line += " — has the WAL-reset bug (docs/explanation/wal-guest.md)"
    system = sqlite.get("system")
    if system and sqlite.get("library") != "system":
        line += f"; the system's {system['version']}" + (
            ", which a Python app's sqlite3 runs, has the WAL-reset bug: see "
            "docs/explanation/wal-guest.md for the app's side" if system["wal_reset_bug"] else "")
    return line


def _postgresql_line(postgresql: dict[str, Any]) -> str:
    return f"postgresql   {postgresql['version']}"


_ENGINE_LINES: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "sqlite": ("memory file", _sqlite_line), "postgresql": ("memory", _postgresql_line)}


def render_before_first_pass(data: dict[str, Any]) -> str:
    where, engine = _store_lines(data)
    return (f"{where}\n{engine}\ndreamd has not run on this file yet: "
            f"{_n(data['turns'], 'turn')} in {_n(data['sessions'], 'session')} wait for its "
            f"first pass (dreamd --db {data['db']} --force)")


def _store_away(away: dict[str, Any]) -> str:
    return (f"store        last away {away['seconds']:.0f} s, {away['since']} → {away['back']} "
            f"(seen by pid {away['pid']} on {away['host']}: "
            f"{away['tries']} {'pass' if away['tries'] == 1 else 'passes'} cut short or "
            "put off, each tried again within seconds)")


def _running(data: dict[str, Any]) -> str:
    """Who works on the store: the daemon holding the file, or a shared store's workers."""
    daemon = data.get("daemon") or {}
    if daemon.get("pid"):
        running = f"pid {daemon['pid']} holds this file"
        if daemon.get("next_pass_at"):
            running += f"; next pass due {daemon['next_pass_at']} (sooner on new turns)"
        return running
    if data.get("workers") is None:  # not a shared store: one dreamd, on its file
        return "no dreamd is running on this file"
    if data.get("workers"):
        return f"{_n(len(data['workers']), 'worker')}: " + ", ".join(
            f"{w['host']} pid {w['pid']} ({_n(w['leases'], 'lease')}, heartbeat "
            f"{w['heartbeat_age']:.0f} s ago)" for w in data["workers"])
    return "no worker has sent a heartbeat lately"


def _notices(data: dict[str, Any]) -> list[str]:
    """The lines status adds when there is something to say: the store away, users
    waiting, an unfinished forget, turns since the last pass, the fallback's rows."""
    out = []
    if data.get("store_away"):
        out.append(_store_away(data["store_away"]))
    waiting = data.get("users_waiting") or {}
    if waiting.get("users"):
        shown = ", ".join(f"{m['user']} {_n(m['turns'], 'turn')}" for m in waiting["most"])
        more = waiting["users"] - len(waiting["most"])
        out.append(f"users        {_n(waiting['users'], 'user')} with turns not in a gist: "
                   f"{shown}" + (f" and {more} more" if more > 0 else ""))
    if data.get("forget"):
        f = data["forget"]
        out.append(f"forget       unfinished for user {f['user']!r}: {f['sessions_left']} of "
                   f"{f['sessions']} sessions left; the next pass (or forget) finishes it")
    if data["backlog"].get("turns_since_last_pass"):
        out.append(f"             {data['backlog']['turns_since_last_pass']} turns arrived "
                   "since the last pass")
    fell_back = (data.get("fallback") or {}).get("rows")
    if fell_back:
        counts = ", ".join(_n(n, kind) for kind, n in fell_back.items())
        out.append(f"fallback     built extractively where the model's answers were rejected "
                   f"twice: {counts}; gists go back to the model after "
                   f"{data['fallback']['retry_hours']:g} h (the notes of the pass that made "
                   "them say why)")
    return out


def _write_lock_line(lock: dict[str, Any]) -> str:
    rows = (f", at most {lock['most_rows']} rows in one" if lock.get("most_rows")
            else "")  # passes before dreamd counted them have none
    waited = f"; waited {lock['waited_ms']} ms for locks" if lock.get("waited_ms") else ""
    return (f"  write lock held {lock['held_ms']} ms over {lock['writes']} "
            f"writes, longest {lock['longest_ms']} ms{rows}{waited}")


def _job_lines(job: dict[str, Any]) -> list[str]:
    counts = ""
    if job["ran"]:
        counts = f"done {job['done']}, failed {job['failed']}, left {job['remaining']}: "
    mark = "ran    " if job["ran"] else "skipped"
    out = [f"  {job['job']:<10} {mark} {counts}{job['reason']}"]
    if job.get("answers"):
        out.append(f"             answers: {answers_line(job['answers'])}")
    out += [f"             ! {err}" for err in job.get("errors") or []]
    return out


def _run_lines(run: dict[str, Any]) -> list[str]:
    """One pass: its trigger and outcome, tokens, write lock, notes, drives and jobs."""
    out = [f"pass {run['id']}  {run['trigger']}  {run['started_at']} → {run['ended_at'] or '…'}"
           f"  {run['outcome']}"]
    if run.get("tokens_in") or run.get("tokens_out"):
        out.append(f"  tokens {run['tokens_in']} in, {run['tokens_out']} out")
    if run.get("write_lock"):
        out.append(_write_lock_line(run["write_lock"]))
    out += [f"  ! {note}" for note in run.get("notes") or []]
    if run.get("drives_after"):
        before, after = _drives(run["drives_before"]), _drives(run["drives_after"])
        out.append(f"  drives {before}  →  {after}")
    for job in run.get("jobs") or []:
        out += _job_lines(job)
    if run.get("error"):
        out.append(f"  error: {run['error']}")
    return out


def _failure_lines(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for title, key in (("failing (will retry)", "failures"), ("quarantined", "quarantined")):
        if data[key]:
            out += ["", f"{title}:"]
            out += [f"  {f['job']} {f['item']}: {f['attempts']} attempts, last {f['last_error']}"
                    for f in data[key]]
            if key == "quarantined":
                out.append("  (fix the cause, then `dreamd retry [JOB [ITEM]]` releases them)")
    return out


def render_status(data: dict[str, Any]) -> str:
    b = data["backlog"]
    where, engine = _store_lines(data)
    out = [
        where,
        f"daemon       {_running(data)}",
        f"backends     completer {data['backends']['completer']}; "
        f"embedder {data['backends']['embedder']}",
        f"drives now   {_drives(data['drives'])}",
        engine,
        f"llm          {data['llm']}",
        "backlog      "
        f"{_n(b['sessions'], 'session')}, {b['dirty']} with unsummarized turns "
        f"({_n(b['unsummarized_turns'], 'turn')}; {b['ripe']} ripe, {b['idle_ripe']} idle), "
        f"{_n(b['unembedded_turns'], 'turn')} unembedded, "
        + (f"{_n(b['unindexed_turns'], 'turn')} not in the words index, "
           if b.get("unindexed_turns") else "") +
        f"{_n(b['stale_months'], 'stale month')}, "
        f"narrative {'stale' if b['narrative_stale'] else 'current'}, "
        f"{_n(b['turns_since_reflection'], 'turn')} since the last reflection",
        *_notices(data),
        "",
    ]
    if not data["runs"]:
        out.append("no passes yet")
    for run in data["runs"]:
        out += _run_lines(run)
    out += diary_lines(data.get("last_pass_changes"))
    out += _failure_lines(data)
    return "\n".join(out)


def render_memory(data: dict[str, Any]) -> str:
    out = [f"== gists ({data['gists']['count']} sessions; latest shown)"]
    for g in data["gists"]["latest"]:
        out.append(f"-- {g['session']} ({g['month']}) [{g.get('made_by') or '-'}]")
        out.append(g["content"])
    out.append(f"\n== profile [{data.get('profile_source') or '-'}]")
    out.append(data["profile"] or "(none yet)")
    out.append("\n== eras")
    for era in data["eras"]:
        out.append(f"-- {era['month']} [{era.get('made_by') or '-'}]")
        out.append(era["content"])
    if not data["eras"]:
        out.append("(none yet)")
    out.append(f"\n== narrative [{data.get('narrative_source') or '-'}]")
    out.append(data["narrative"] or "(none yet)")
    out.append("\n== self-state")
    state = data["self_state"] or {}
    if not state:
        out.append("(none yet)")
    for key in ("mood", "energy", "self_narrative", "topics", "drives"):
        if key in state:
            out.append(f"{key}: {state[key]}")
    for reflection in state.get("reflections", [])[-3:]:
        out.append(f"reflection: {reflection}")
    return "\n".join(out)


def answers_line(counts: dict[str, int]) -> str:
    """What became of a job's model answers in a pass, in words: "asked 30, kept first
    time 27, asked again 2 (kept 1, 812 tokens), refused 2, fell back 2; first refusals:
    off-topic 2, loop 1; facts dropped: grounded 3"."""
    again = counts.get("asked_again", 0)
    parts = [f"asked {counts.get('asked', 0)}", f"kept first time {counts.get('kept_first', 0)}"]
    if again:
        parts.append(f"asked again {again} (kept {counts.get('kept_again', 0)}, "
                     f"{counts.get('reask_tokens', 0)} tokens)")
    for key, words in (("refused", "refused"), ("fell_back", "fell back")):
        if counts.get(key):
            parts.append(f"{words} {counts[key]}")
    line = ", ".join(parts)
    for prefix, words in (("refused_first:", "first refusals"), ("dropped:", "facts dropped")):
        found = {k[len(prefix):]: n for k, n in counts.items() if k.startswith(prefix)}
        if found:
            line += f"; {words}: " + ", ".join(f"{k} {n}" for k, n in sorted(found.items()))
    return line

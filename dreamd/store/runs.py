"""The record of runs: passes (dreamd_runs), failures and quarantine, stored LLM outputs,
tokens used."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dreamd.store.interface import Conn


def cached_output(conn: Conn, job: str, item: str) -> tuple[str, str] | None:
    """(input_hash, output) of the last output stored for this job item."""
    row = conn.execute(
        "SELECT input_hash, output FROM dreamd_outputs WHERE job = ? AND item = ?", (job, item)
    ).fetchone()
    return (row[0], row[1]) if row else None


def save_output(conn: Conn, job: str, item: str, input_hash: str,
                output: str) -> None:
    conn.execute(
        "INSERT INTO dreamd_outputs (job, item, input_hash, output) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(job, item) DO UPDATE SET input_hash = excluded.input_hash, "
        "output = excluded.output",
        (job, item, input_hash, output),
    )


def tokens_since(conn: Conn, started_at: str) -> int:
    """Tokens (in + out) recorded by passes that started at or after `started_at`."""
    row = conn.execute(
        "SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM dreamd_runs WHERE started_at >= ?",
        (started_at,),
    ).fetchone()
    return int(row[0])


@dataclass(frozen=True)
class Failure:
    job: str
    item: str
    attempts: int
    last_error: str
    last_failed_at: str
    next_attempt_at: str
    quarantined: bool


def failures(conn: Conn, job: str | None = None) -> list[Failure]:
    sql = (
        "SELECT job, item, attempts, last_error, last_failed_at, next_attempt_at, quarantined "
        "FROM dreamd_failures"
    )
    rows = conn.execute(sql + (" WHERE job = ?" if job else "") + " ORDER BY job, item",
                        (job,) if job else ()).fetchall()
    return [Failure(r[0], r[1], int(r[2]), r[3], r[4], r[5], bool(r[6])) for r in rows]


def record_failure(
    conn: Conn, job: str, item: str, error: str, now: str, next_at: str,
    quarantine: bool,
) -> int:
    conn.execute(
        "INSERT INTO dreamd_failures (job, item, attempts, last_error, first_failed_at, "
        "last_failed_at, next_attempt_at, quarantined) VALUES (?, ?, 1, ?, ?, ?, ?, ?) "
        "ON CONFLICT(job, item) DO UPDATE SET attempts = dreamd_failures.attempts + 1, "
        "last_error = excluded.last_error, last_failed_at = excluded.last_failed_at, "
        "next_attempt_at = excluded.next_attempt_at, quarantined = excluded.quarantined",
        (job, item, error[:500], now, now, next_at, int(quarantine)),
    )
    return int(
        conn.execute(
            "SELECT attempts FROM dreamd_failures WHERE job = ? AND item = ?", (job, item)
        ).fetchone()[0]
    )


def failure_attempts(conn: Conn, job: str, item: str) -> int:
    """Attempts recorded so far for an item (0 when it never failed)."""
    row = conn.execute("SELECT attempts FROM dreamd_failures WHERE job = ? AND item = ?",
                       (job, item)).fetchone()
    return int(row[0]) if row else 0


def clear_failure(conn: Conn, job: str, item: str) -> None:
    conn.execute("DELETE FROM dreamd_failures WHERE job = ? AND item = ?", (job, item))


def release_failures(conn: Conn, job: str | None, item: str | None) -> int:
    """Forget the failure records of a job (or one item of it, or every job's): released
    items are tried again by the next pass. Returns how many."""
    cur = conn.execute(
        "DELETE FROM dreamd_failures WHERE (?1 IS NULL OR job = ?1) AND (?2 IS NULL OR item = ?2)",
        (job, item))
    return cur.rowcount


def start_run(conn: Conn, trigger: str, pid: int, now: str, worker: str | None = None
              ) -> int:
    """A pass begins; `worker` names a worker on a shared store (PostgreSQL only)."""
    if worker is not None:
        row = conn.execute(
            "INSERT INTO dreamd_runs (trigger, pid, started_at, outcome, worker) "
            "VALUES (?, ?, ?, 'running', ?) RETURNING id", (trigger, pid, now, worker)
        ).fetchone()
        return int(row[0])
    row = conn.execute(
        "INSERT INTO dreamd_runs (trigger, pid, started_at, outcome) "
        "VALUES (?, ?, ?, 'running') RETURNING id", (trigger, pid, now)).fetchone()
    return int(row[0])


def end_crashed_runs(conn: Conn) -> int:
    """Runs still 'running' when a dreamd starts on the file (it holds the file's lock,
    so their process is gone): mark them as ended by a crash. Returns how many."""
    cur = conn.execute(
        "UPDATE dreamd_runs SET outcome = 'crashed', "
        "error = 'dreamd (pid ' || COALESCE(CAST(pid AS TEXT), '?') "
        "|| ') ended before the pass finished' "
        "WHERE outcome = 'running'")
    return cur.rowcount


def end_stopped_runs(conn: Conn, pid: int, now: str, worker: str | None = None,
                     error: str = "stopped: a backend call was still in flight when the "
                                  "stop grace ended", outcome: str = "interrupted") -> None:
    """The unfinished runs of `pid` (of `worker`, on a shared store, where another
    machine's process may have the same pid), leaving on a stop with a call in flight, or
    whose pass process ended without finishing them."""
    mine, params = ("worker = ?", (worker,)) if worker is not None else ("pid = ?", (pid,))
    conn.execute(
        "UPDATE dreamd_runs SET outcome = ?, ended_at = ?, error = ? "
        f"WHERE outcome = 'running' AND {mine}", (outcome, now, error, *params))


# The outcome of a pass the store cut short: its server went away mid-pass.
CUT_SHORT = "store_away"


def end_cut_short_runs(conn: Conn, pid: int, now: str, error: str,
                       worker: str | None = None) -> int:
    """The unfinished runs of `pid` (of `worker` on a shared store), between passes: the
    store cut them short before they could say so. Returns how many."""
    mine, params = ("worker = ?", (worker,)) if worker is not None else ("pid = ?", (pid,))
    cur = conn.execute("UPDATE dreamd_runs SET outcome = ?, ended_at = ?, error = ? "
                       f"WHERE outcome = 'running' AND {mine}",
                       (CUT_SHORT, now, error, *params))
    return cur.rowcount


def finish_run(conn: Conn, run_id: int, **fields: Any) -> None:
    names = sorted(fields)
    values = [
        json.dumps(fields[n], sort_keys=True) if isinstance(fields[n], dict | list) else fields[n]
        for n in names
    ]
    assignments = ", ".join(f"{n} = ?" for n in names)
    conn.execute(f"UPDATE dreamd_runs SET {assignments} WHERE id = ?", (*values, run_id))


def recent_runs(conn: Conn, limit: int) -> list[dict[str, Any]]:
    conn_rows = conn.execute(
        "SELECT id, trigger, pid, started_at, ended_at, outcome, drives_before, drives_after, "
        "stats_before, stats_after, jobs, tokens_in, tokens_out, error, notes, write_lock "
        "FROM dreamd_runs "
        "ORDER BY id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    keys = ("id", "trigger", "pid", "started_at", "ended_at", "outcome", "drives_before",
            "drives_after", "stats_before", "stats_after", "jobs", "tokens_in", "tokens_out",
            "error", "notes", "write_lock")
    out = []
    for row in conn_rows:
        record = dict(zip(keys, row, strict=True))
        for k in ("drives_before", "drives_after", "stats_before", "stats_after", "jobs", "notes",
                  "write_lock"):
            record[k] = json.loads(record[k]) if record[k] else None
        out.append(record)
    return out


def drop_outputs(conn: Conn, job: str, item: str) -> None:
    """A job item's stored LLM output and failure record (both may quote its inputs)."""
    conn.execute("DELETE FROM dreamd_outputs WHERE job = ? AND item = ?", (job, item))
    conn.execute("DELETE FROM dreamd_failures WHERE job = ? AND item = ?", (job, item))

"""Leases: how many dreamd workers share one PostgreSQL store without a coordinator.

A worker claims users with work for a while (`expires_at`, in the server's clock) with
`FOR UPDATE SKIP LOCKED`, so two workers claiming at once never wait on each other and
never take the same user; a heartbeat extends the leases its running pass still works
on, and no others; it releases them when it is done. A worker that dies (kill -9, a lost
machine), or whose pass ended without reaching the server to release them, stops
extending them, and once they expire another worker takes its users and finishes the
work; the worker itself may take back a lease it still holds. Every write a pass
makes stays conditional on what it read, so a worker that stalls past its lease and wakes
up again cannot write the same work twice. A lease is a row, not a session-level advisory
lock: a pooler or a reconnect cannot drop it unseen.

A pass claims a user once: one another worker claimed and released after the pass began
is passed over. The agent's own work (reflect, over every user) is one more lease, keyed
`agent:<id>`, which the last worker to let its users go takes (dreamd.dream.cycle).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dreamd.errors import StoreError
from dreamd.store.interface import Store
from dreamd.store.postgres.store import PgStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS dreamd_leases (
    key TEXT PRIMARY KEY,
    worker TEXT,
    expires_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    claimed_at TIMESTAMPTZ,
    claims BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS dreamd_workers (
    worker TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now())
"""


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _pg(store: Store) -> PgStore:
    if not isinstance(store, PgStore):
        raise StoreError(f"internal: leases on a store that is not shared ({store.engine})")
    return store


def own_connection(store: Store, busy_timeout_ms: int) -> Store:
    """A connection of its own to the same shared store: a heartbeat that must not wait
    for the pass's transactions."""
    return _pg(store).another(busy_timeout_ms)


def _tx(store: Store, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """One statement in a transaction of its own (not behind dreamd's write lock: a
    claim must not wait for another worker's write)."""
    with _pg(store).transaction() as conn:
        cur = conn.raw.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def claim(store: Store, worker: str, keys: list[str], limit: int, seconds: float,
          since: datetime | None = None) -> list[str]:
    """Up to `limit` of `keys` that nobody holds (or whose lease ran out, or that `worker`
    holds itself: a pass of its own that ended before it could release them), now held
    by `worker` for `seconds`; the longest unclaimed first. With `since` (the server's
    clock when the claimer's pass began), a key another worker claimed and released after
    then is passed over: its work up to that moment is done. (A lease that ran out
    unreleased is not: its worker died, and its work is left.)"""
    if not keys or limit <= 0:
        return []
    # Only the keys not there yet: a key already there may be held by a worker claiming
    # it this moment, and an INSERT that meets it waits for that claim to commit (with
    # 64 workers, most of the fleet's lock waits came from here).
    _tx(store, "INSERT INTO dreamd_leases (key) SELECT k FROM unnest(%s::text[]) AS k "
        "WHERE NOT EXISTS (SELECT 1 FROM dreamd_leases l WHERE l.key = k) "
        "ON CONFLICT DO NOTHING", (keys,))
    rows = _tx(store,
               "WITH free AS (SELECT key FROM dreamd_leases WHERE key = ANY(%s) "
               "AND (expires_at < now() OR worker = %s) AND (worker IS NOT NULL "
               "OR claimed_at IS NULL OR claimed_at < %s::timestamptz) "
               "ORDER BY claimed_at NULLS FIRST, key LIMIT %s FOR UPDATE SKIP LOCKED) "
               "UPDATE dreamd_leases l SET worker = %s, claimed_at = now(), "
               "expires_at = now() + make_interval(secs => %s), claims = l.claims + 1 "
               "FROM free WHERE l.key = free.key RETURNING l.key",
               (keys, worker, since or "infinity", limit, worker, seconds))
    return sorted(str(r[0]) for r in rows)


def server_now(store: Store) -> datetime:
    """The database server's clock: what `claim`'s `since` is read against."""
    result: datetime = _tx(store, "SELECT now()", ())[0][0]
    return result


def others_hold(store: Store, worker: str, prefix: str) -> int:
    """Unexpired leases on keys starting with `prefix` that other workers hold."""
    rows = _tx(store, "SELECT COUNT(*) FROM dreamd_leases WHERE key LIKE %s AND "
               "expires_at > now() AND worker IS DISTINCT FROM %s", (prefix + "%", worker))
    return int(rows[0][0])


def release(store: Store, worker: str, keys: list[str]) -> None:
    if keys:
        _tx(store, "UPDATE dreamd_leases SET worker = NULL, expires_at = '-infinity' "
            "WHERE key = ANY(%s) AND worker = %s", (keys, worker))


@dataclass(frozen=True)
class Beat:
    held: int  # leases the beat extended
    here: int  # live workers on its machine, itself included


def heartbeat(store: Store, worker: str, seconds: float, keys: list[str]) -> Beat:
    """Extend `worker`'s unexpired leases on `keys` (those its running pass works on) and
    note it is alive; returns the leases extended and how many live workers (a heartbeat
    within `seconds`) share its machine. (A lease that ran out stays out: another worker
    may hold it now.)"""
    rows = _tx(store,
               "WITH kept AS (UPDATE dreamd_leases SET expires_at = now() + "
               "make_interval(secs => %s) WHERE worker = %s AND key = ANY(%s) "
               "AND expires_at > now() RETURNING 1) SELECT COUNT(*) FROM kept",
               (seconds, worker, keys))
    held = int(rows[0][0])
    host = socket.gethostname()
    _tx(store, "INSERT INTO dreamd_workers (worker, host, pid) VALUES (%s, %s, %s) "
        "ON CONFLICT (worker) DO UPDATE SET heartbeat_at = now()",
        (worker, host, os.getpid()))
    here = _tx(store, "SELECT COUNT(*) FROM dreamd_workers WHERE host = %s AND "
               "heartbeat_at > now() - make_interval(secs => %s)", (host, seconds))
    return Beat(held, max(1, int(here[0][0])))


def leave(store: Store, worker: str) -> None:
    """A worker stopping: its leases and its row go."""
    _tx(store, "UPDATE dreamd_leases SET worker = NULL, expires_at = '-infinity' "
        "WHERE worker = %s", (worker,))
    _tx(store, "DELETE FROM dreamd_workers WHERE worker = %s", (worker,))


@dataclass(frozen=True)
class WorkerRow:
    host: str
    pid: int
    leases: int
    heartbeat_age: float  # seconds since its last heartbeat
    started_at: str


def workers(store: Store, stale_after: float) -> list[WorkerRow]:
    """Workers that sent a heartbeat within `stale_after` seconds, with the leases they
    hold now."""
    with _pg(store).read() as conn:
        rows = conn.raw.execute(
            "SELECT w.host, w.pid, (SELECT COUNT(*) FROM dreamd_leases l WHERE l.worker = "
            "w.worker AND l.expires_at > now()), "
            "EXTRACT(EPOCH FROM now() - w.heartbeat_at)::float8, w.started_at::text "
            "FROM dreamd_workers w WHERE w.heartbeat_at > now() - make_interval(secs => %s) "
            "ORDER BY w.host, w.pid", (stale_after,)).fetchall()
    return [WorkerRow(str(r[0]), int(r[1]), int(r[2]), float(r[3]), str(r[4])) for r in rows]


def end_orphaned_runs(store: Store, stale_after: float) -> int:
    """Passes still marked running whose worker sent no heartbeat for `stale_after`
    seconds: their process is gone. Marks them crashed; returns how many."""
    rows = _tx(store,
               "WITH gone AS (UPDATE dreamd_runs SET outcome = 'crashed', "
               "error = 'dreamd (pid ' || pid || ') ended before the pass finished' "
               "WHERE outcome = 'running' AND (worker IS NULL OR worker NOT IN "
               "(SELECT worker FROM dreamd_workers WHERE heartbeat_at > now() - "
               "make_interval(secs => %s))) RETURNING 1) SELECT COUNT(*) FROM gone",
               (stale_after,))
    _tx(store, "DELETE FROM dreamd_workers WHERE heartbeat_at < now() - interval '1 day'", ())
    return int(rows[0][0])

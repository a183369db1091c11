"""Bringing a file up to date: dreamd's migrations (see schema.MIGRATIONS) applied in
order, each in its own write with its record, and a read-only look that they all are."""

from __future__ import annotations

from datetime import UTC, datetime

from dreamd.errors import NotMigrated, StoreError
from dreamd.store.sqlite import driver, schema
from dreamd.store.sqlite.store import SqliteStore


def applied_versions(store: SqliteStore) -> set[int]:
    conn = store.conn
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='dreamd_migrations'"
    ).fetchone()
    if not exists:
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM dreamd_migrations")}


def require_current(store: SqliteStore) -> None:
    """For read-only use: the file must carry every migration this dreamd knows, since
    reading must not apply them. Says plainly when dreamd has not run on it yet."""
    applied = applied_versions(store)
    known = {m.version for m in schema.MIGRATIONS}
    if not applied:
        raise NotMigrated(
            f"dreamd has not run on {store.path} yet: nothing to read until its first pass "
            f"(dreamd --db {store.path} --force)")
    if applied - known:
        raise StoreError(
            f"{store.path} was migrated by a newer dreamd (version {max(applied - known)}); "
            "upgrade dreamd")
    if known - applied:
        raise NotMigrated(
            f"{store.path} was last set up by an older dreamd; the next pass upgrades it "
            f"(dreamd --db {store.path} --force)")


def migrate(store: SqliteStore, upto: int | None = None) -> list[int]:
    """Apply every pending migration (up to version `upto`, to build an older file), each in
    its own IMMEDIATE transaction with its record."""
    done: list[int] = []
    known = {m.version for m in schema.MIGRATIONS}
    for migration in schema.MIGRATIONS:
        if upto is not None and migration.version > upto:
            break
        with store.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS dreamd_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            # Checked inside the write lock: two dreamd processes starting at once
            # cannot both apply the same migration.
            row = conn.execute(
                "SELECT 1 FROM dreamd_migrations WHERE version = ?", (migration.version,)
            ).fetchone()
            if row:
                continue
            try:
                migration.apply(conn)
            except driver.Error as exc:
                raise StoreError(
                    f"migration {migration.version} ({migration.name}) failed: {exc}"
                ) from None
            conn.execute(
                "INSERT INTO dreamd_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, datetime.now(UTC).isoformat()),
            )
        done.append(migration.version)
    newer = applied_versions(store) - known
    if newer:
        raise StoreError(
            f"{store.path} was migrated by a newer dreamd (version {max(newer)}); upgrade dreamd"
        )
    return done

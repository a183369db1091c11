"""One schema on both engines: SQLite's file grows through its migrations, PostgreSQL's
schema is written out whole (store/pg_schema.py). Both are opened and compared: tables,
columns, their types by kind, indexes and the schema version. What differs on purpose is
listed here, and nothing else may."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dreamd.config import Config
from dreamd.store.interface import Conn, Store
from dreamd.store.opening import open_store
from dreamd.store.sqlite import schema as migrations

# The words index is each engine's own (an FTS5 table and its shadow tables; a table
# with a tsvector column and its GIN index); leases, workers and the worker that ran a
# pass exist where workers share a store.
ENGINE_ONLY: dict[str, dict[str, set[str]]] = {
    "sqlite": {"tables": set(), "indexes": set(), "columns": set()},
    "postgresql": {"tables": {"dreamd_leases", "dreamd_workers"},
                   "indexes": {"dreamd_fts_words"}, "columns": {"dreamd_runs.worker"}}}
WORDS_INDEX = "dreamd_fts"

KINDS = (("int", r"INT"), ("text", r"TEXT|CHAR"), ("bytes", r"BLOB|BYTEA"),
         ("float", r"REAL|DOUBLE|FLOAT|NUMERIC"))


def kind(declared: str) -> str:
    for name, pattern in KINDS:
        if re.search(pattern, declared.upper()):
            return name
    return declared.lower()


def shape(store: Store) -> dict[str, Any]:
    """Tables with their columns' kinds and whether each is required (NOT NULL outside
    the primary key), index names, the versions applied."""
    with store.read() as conn:
        if store.engine == "sqlite":
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' AND name NOT LIKE ?", (f"{WORDS_INDEX}_%",))]
            tables = {t: {r[1]: (kind(r[2]), bool(r[3]) and not r[5])
                          for r in conn.execute(f"PRAGMA table_info({t})")} for t in names}
            indexes = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        else:
            tables = {}
            for table, column, declared, nullable, in_key in conn.execute(
                    "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, "
                    "EXISTS (SELECT 1 FROM information_schema.key_column_usage k JOIN "
                    "information_schema.table_constraints t USING (constraint_name, "
                    "table_schema, table_name) WHERE t.constraint_type = 'PRIMARY KEY' "
                    "AND k.table_schema = c.table_schema AND k.table_name = c.table_name "
                    "AND k.column_name = c.column_name) FROM information_schema.columns c "
                    "WHERE c.table_schema = current_schema()"):
                tables.setdefault(table, {})[column] = (kind(declared),
                                                        nullable == "NO" and not in_key)
            indexes = {r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND indexname NOT LIKE '%_pkey'")}
        versions = sorted(r[0] for r in conn.execute("SELECT version FROM dreamd_migrations"))
    return {"tables": tables, "indexes": indexes, "versions": versions}


def drift(sqlite: dict[str, Any], pg: dict[str, Any]) -> list[str]:
    """Every difference between the two shapes that is not one of ENGINE_ONLY's."""
    found: list[str] = []
    for engine, mine, other in (("sqlite", sqlite, pg), ("postgresql", pg, sqlite)):
        extra = set(mine["tables"]) - set(other["tables"]) - ENGINE_ONLY[engine]["tables"]
        found += [f"table {t} only on {engine}" for t in sorted(extra)]
        extra = mine["indexes"] - other["indexes"] - ENGINE_ONLY[engine]["indexes"]
        found += [f"index {i} only on {engine}" for i in sorted(extra)]
    for table in sorted(set(sqlite["tables"]) & set(pg["tables"]) - {WORDS_INDEX}):
        a, b = sqlite["tables"][table], pg["tables"][table]
        for column in sorted(set(a) | set(b)):
            only = "sqlite" if column not in b else "postgresql" if column not in a else ""
            if only and f"{table}.{column}" in ENGINE_ONLY[only]["columns"]:
                continue
            if a.get(column) != b.get(column):
                found.append(f"{table}.{column}: sqlite {a.get(column)}, "
                             f"postgresql {b.get(column)}")
    if sqlite["versions"] != pg["versions"]:
        found.append(f"versions: sqlite {sqlite['versions']}, postgresql {pg['versions']}")
    return found


@pytest.fixture
def both(tmp_path: Path, pg_server: Any) -> tuple[Config, Config]:
    return Config(db=str(tmp_path / "memory.db")), Config(db=str(pg_server.new_database()))


def shapes(sqlite: Config, pg: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    out = []
    for config in (sqlite, pg):
        store = open_store(config)
        try:
            out.append(shape(store))
        finally:
            store.close()
    return out[0], out[1]


def test_both_engines_have_one_schema(both: tuple[Config, Config]) -> None:
    sqlite, pg = shapes(*both)
    assert drift(sqlite, pg) == []
    assert sqlite["versions"] == [m.version for m in migrations.MIGRATIONS]
    assert len(sqlite["tables"]) > 15 and len(sqlite["indexes"]) > 8  # the walk found them


def test_a_migration_on_one_engine_alone_is_drift(both: tuple[Config, Config],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a next migration had been added to SQLite's list and not to PostgreSQL's."""
    def confidence(conn: Conn) -> None:
        conn.execute("ALTER TABLE facts ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0")

    last = migrations.MIGRATIONS[-1].version
    added = migrations.Migration(last + 1, "how sure a fact is", confidence)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, added))
    sqlite, pg = shapes(*both)
    assert drift(sqlite, pg) == [
        "facts.confidence: sqlite ('float', True), postgresql None",
        f"versions: sqlite {list(range(1, last + 2))}, postgresql {list(range(1, last + 1))}"]

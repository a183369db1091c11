"""The package's shape: SQL only in the store, nothing above it tied to SQLite, modules
of a readable size. (A job added by one spec and one registration: test_cycle.)"""

from __future__ import annotations

import re

from tests.helpers import (
    ROOT,
)

PACKAGE = ROOT / "dreamd"
ABOVE_STORE = [p for p in PACKAGE.rglob("*.py") if "store" not in p.relative_to(PACKAGE).parts]
# What only an SQLite engine would say: its module, statements, its full-text syntax.
ENGINE_WORDS = re.compile(r"\bimport sqlite3\b|sqlite3\.|\.execute(many)?\(|\bMATCH\b|"
                          r"\bbm25\b|\browid\b|PRAGMA")


def test_nothing_above_the_store_knows_the_engine() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in ABOVE_STORE
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if ENGINE_WORDS.search(line)]
    assert offenders == []
    assert len(ABOVE_STORE) > 30  # the walk found the package


def test_modules_are_readable_sizes() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert max(sizes.values()) <= 500, max(sizes.items(), key=lambda kv: kv[1])
    top = [p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed")]
    assert len(top) <= 16, sorted(top)

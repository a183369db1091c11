"""The package's shape: SQL only in the store, nothing above it tied to SQLite, modules
of a readable size. (A job added by one spec and one registration: test_cycle.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = ROOT / "dreamd"
ABOVE_STORE = [p for p in PACKAGE.rglob("*.py") if "store" not in p.relative_to(PACKAGE).parts]
# The demo plays the chat app, which makes and writes an SQLite file of its own: the one
# line above the store that names an engine.
PLAYS_THE_APP = "dreamd/cli/demo.py: from dreamd.store.sqlite import app_file"
# What only an engine would say, or code that asks which engine it holds: an engine's
# store class, module or driver. (Above the store, code asks a Store what it can do.)
ENGINE_WORDS = re.compile(r"\bimport sqlite3\b|sqlite3\.|\.execute(many)?\(|\bMATCH\b|"
                          r"\bbm25\b|\browid\b|PRAGMA|\bPgStore\b|\bSqliteStore\b|"
                          r"\bapsw\b|\bpsycopg\b|store\.(postgres|sqlite)\b")


def test_nothing_above_the_store_knows_the_engine() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in ABOVE_STORE
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if ENGINE_WORDS.search(line)
                 and f"{p.relative_to(ROOT)}: {line.strip()}" != PLAYS_THE_APP]
    assert offenders == []
    assert len(ABOVE_STORE) > 30  # the walk found the package


def test_modules_are_readable_sizes() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert max(sizes.values()) <= 500, max(sizes.items(), key=lambda kv: kv[1])
    top = [p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed")]
    assert len(top) <= 18, sorted(top)  # the leaves every layer shares, and the packages


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The dreamd modules a module imports, at its top or inside a function alike (a
    deferred import hides a cycle, it does not remove one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dreamd"):
            for alias in node.names:  # `from dreamd.cli import render` is the submodule
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("dreamd"))
    return found


def module_graph() -> dict[str, list[str]]:
    """Each dreamd module and the dreamd modules it imports."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    return {name: sorted(imports_of(path, set(modules)) & modules.keys() - {name})
            for name, path in modules.items()}


def cycles_of(graph: dict[str, list[str]]) -> list[str]:
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in graph[name]:
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*trail[trail.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycle_between_modules() -> None:
    graph = module_graph()
    assert cycles_of(graph) == []
    assert len(graph) > 60 and graph["dreamd.config"]  # the walk found the package


def package_of(module: str) -> str:
    """dreamd.serve.app -> dreamd.serve; a module at the top is its own: dreamd.config."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages() -> None:
    """Layers: the server and the command line both read the status report, and the server
    never loads the command line; the store, a config's URL helper, the text helpers and
    the backends each stay below what uses them."""
    graph: dict[str, set[str]] = {}
    for name, deps in module_graph().items():
        graph.setdefault(package_of(name), set()).update(
            package_of(d) for d in deps if package_of(d) != package_of(name))
    assert cycles_of({k: sorted(v) for k, v in graph.items()}) == []
    assert "dreamd.cli" not in graph["dreamd.serve"] and "dreamd.cli" in graph["dreamd.__main__"]


def test_bench_never_imports_the_tests() -> None:
    """Benchmarks share test support through testkit/, never through tests/."""
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py")
                 if {m.split(".")[0] for m in imports_of_any(p)} & {"tests"}]
    assert offenders == []


def imports_of_any(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return ({a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module})


# The store's modules that hold queries both engines run; each engine's own SQL lives
# in its package (store/sqlite/, store/postgres/), and the leases only a shared engine
# takes in leases.py.
SHARED_QUERIES = ["turns", "tiers", "vectors", "facts", "pending", "queues", "runs",
                  "state", "tally", "provenance", "erasure"]
ASKS_THE_ENGINE = re.compile(r"\.engine\b|engine_of|\"(postgresql|sqlite)\"|"
                             r"isinstance\([^)]*(Pg|Sqlite)\w*\)|\bPRAGMA\b|\bMATCH\b")


def test_no_shared_query_module_asks_which_engine_it_is_on() -> None:
    offenders = [f"{name}.py:{n}: {line.strip()}"
                 for name in SHARED_QUERIES
                 for n, line in enumerate((PACKAGE / "store" / f"{name}.py").read_text()
                                          .splitlines(), 1)
                 if ASKS_THE_ENGINE.search(line)]
    assert offenders == []


def test_no_module_re_exports_the_store_as_one_namespace() -> None:
    """Callers import the module that owns a query (there was a barrel, store.queries)."""
    assert not (PACKAGE / "store" / "queries.py").exists()
    users = [p for p in (*PACKAGE.rglob("*.py"), *ROOT.glob("tests/*.py"),
                         *ROOT.glob("bench/*.py")) if p.name != "test_layout.py"
             and ("store.queries" in p.read_text() or "import queries" in p.read_text())]
    assert users == []


ENGINES = ("sqlite", "postgres")
DRIVER_IMPORT = re.compile(r"^\s*(import|from)\s+(apsw|sqlite3|psycopg)\b")


def outside_the_engines() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py")
            if not any(p.is_relative_to(PACKAGE / "store" / e) for e in ENGINES)]


def test_only_an_engine_imports_its_driver() -> None:
    """apsw and sqlite3 are imported in store/sqlite/ alone, psycopg in store/postgres/
    alone: the shared query modules, opening and everything above see a `Store`."""
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in outside_the_engines()
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if DRIVER_IMPORT.search(line)]
    assert offenders == []
    inside = [p.relative_to(PACKAGE).parts[1] for p in PACKAGE.rglob("*.py")
              if DRIVER_IMPORT.search(p.read_text()) or
              any(DRIVER_IMPORT.search(line) for line in p.read_text().splitlines())]
    assert sorted(set(inside)) == ["postgres", "sqlite"]  # the walk found the drivers


# Code that branches on which engine it holds: comparing an engine's name, or feeling
# for an attribute that only one engine's connection or store has.
NAME_COMPARED = re.compile(r"(==|!=)\s*\"(sqlite|postgresql)\"|"
                           r"\"(sqlite|postgresql)\"\s*(==|!=|in\b|not in\b)|"
                           r"\bengine\s*(==|!=)|\.engine\s+(not\s+)?in\b")
DUCK_TYPED = re.compile(r"\b(getattr|hasattr)\(\s*(self\.)?(conn|raw|store|_conn)\b")


def test_no_code_asks_which_engine_it_holds() -> None:
    """A store says what it can do (`shared`, `listen`, its `Dialect`'s `readable`, a
    connection's `on_commit`); no module compares an engine's name or duck-types a
    connection, inside the engines' packages or out."""
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in PACKAGE.rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if NAME_COMPARED.search(line) or DUCK_TYPED.search(line)]
    assert offenders == []


def test_the_engines_are_found_only_through_opening() -> None:
    """Outside the engines' packages, only the store's opening, its error wording and the
    shared store's leases import them (and the demo, which plays the chat app)."""
    graph = module_graph()
    reaching = sorted(name for name, deps in graph.items()
                      if not name.startswith(("dreamd.store.sqlite", "dreamd.store.postgres"))
                      and any(d.startswith(("dreamd.store.sqlite", "dreamd.store.postgres"))
                              for d in deps))
    assert reaching == ["dreamd.cli.demo", "dreamd.store.failure", "dreamd.store.leases",
                        "dreamd.store.opening"]  # the interface below them names none


def test_a_job_context_holds_at_most_a_dozen_attributes() -> None:
    """A job is handed the pass's dependencies, its state, the policy for asking a model
    and its threads as separate objects: what a job reads as `ctx.<name>` (fields and
    properties alike) stays at a dozen names, not the 38 of one object holding them all."""
    import dataclasses

    from dreamd.dream.jobs.base import JobContext

    fields = {f.name for f in dataclasses.fields(JobContext)}
    properties = {name for name, value in vars(JobContext).items()
                  if isinstance(value, property)}
    assert len(fields | properties) <= 12, sorted(fields | properties)
    assert {"deps", "state", "asking"} <= fields

"""The reference pages, written from the code when the site is built (mkdocs-gen-files
runs this file): the configuration from dreamd/config.py's dataclasses, the HTTP API from
the server's own OpenAPI document, the Prometheus metrics from dreamd/serve/metrics.py,
the exit codes and errors from dreamd/errors.py, and the memory file's tables from a
store made fresh by dreamd's own migrations; the command line from its click definitions.
Nothing here is typed by hand beside the code it describes, so a
key, route, metric or column that changes changes its page; tests/test_docs.py calls
these functions without MkDocs."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sqlite3
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("<!-- Generated from the code by docs/gen_reference.py when the site is built: "
             "edit the code, not this page. -->\n\n")


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def code(text: Any) -> str:
    return f"`{text}`" if str(text) != "" else '`""`'


# ---------------------------------------------------------------------------- command line


def _help_text(text: str) -> list[str]:
    """A click docstring as Markdown: a paragraph click keeps as written (`\\b`) becomes
    a text block, the rest paragraphs."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            block = textwrap.dedent("\n".join(line.rstrip() for line in lines[1:]))
            out += ["```text", block, "```", ""]
        else:
            out += [" ".join(line.strip() for line in lines), ""]
    return out


def commands(command: Any, name: str, parent: Any = None) -> Iterator[tuple[str, Any, Any]]:
    """(full name, command, context) for `command` and every subcommand below it."""
    import click

    ctx = click.Context(command, info_name=name.split()[-1], parent=parent)
    yield name, command, ctx
    if isinstance(command, click.Group):
        for sub in sorted(command.list_commands(ctx)):
            yield from commands(command.get_command(ctx, sub), f"{name} {sub}", ctx)


def cli_reference() -> str:
    """Every command with its usage, help and options, as `--help` prints them, from the
    click definitions (dreamd.cli.main)."""
    import click

    from dreamd.cli import main

    out = [GENERATED]
    for name, command, ctx in commands(main, "dreamd"):
        depth = min(name.count(" ") + 2, 4)
        out += [f"{'#' * depth} `{name}`\n", "```text", command.get_usage(ctx), "```", ""]
        out += _help_text(command.help or "")
        rows = []
        for param in command.get_params(ctx):
            if isinstance(param, click.Argument):
                rows.append((f"`{param.human_readable_name}`", "argument" +
                             ("" if param.required else ", optional"), ""))
                continue
            record = param.get_help_record(ctx)
            if record:
                rows.append((f"`{record[0]}`", "option", record[1]))
        if rows:
            out += ["| name | kind | what it does |", "|---|---|---|"]
            out += [f"| {cell(a)} | {b} | {cell(c)} |" for a, b, c in rows]
            out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- config


def example_comments(text: str) -> dict[tuple[str, str], str]:
    """Each key's comment in config.example.toml: the comment lines just above it (a
    blank line or a section header ends a comment). Keys listed under one comment share
    it; the ones after the first are marked so."""
    said: dict[tuple[str, str], str] = {}
    section, comment, last = "", [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
        elif stripped.startswith("["):
            section, comment, last = stripped.strip("[]"), [], ""
        elif stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
        elif "=" in stripped:
            key = stripped.split("=", 1)[0].strip()
            if comment:
                said[(section, key)] = " ".join(comment)
                last = key
            elif last:
                said[(section, key)] = f"As `{last}` above."
            comment = []
    return said


def _kind(meta: dict[str, Any], annotation: str) -> tuple[str, str]:
    """(type, what it allows) from a field's check metadata."""
    kind = meta.get("kind", annotation)
    allowed = []
    if kind == "choice":
        return "string", "one of " + ", ".join(code(c) for c in meta["choices"])
    if kind == "optstr":
        return "string", "may be empty"
    if kind == "str":
        return "string", "not empty"
    if kind == "quiet_hours":
        return "string", "`HH:MM-HH:MM` local time, or empty"
    if kind == "cron":
        return "string", "a crontab expression, or empty"
    if "min" in meta:
        allowed.append(f"≥ {meta['min']:g}")
    if "max" in meta:
        allowed.append(f"≤ {meta['max']:g}")
    return {"int": "integer", "float": "number", "bool": "boolean"}.get(kind, kind), \
        ", ".join(allowed)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def config_keys() -> Iterator[tuple[str, str, str, Any, str, str]]:
    """(section, key, type, default, allowed, environment variable) for every key the
    dataclasses define, in their order; section "" is the top level."""
    from dreamd.config import Config

    defaults = Config()
    for f in dataclasses.fields(Config):
        value = getattr(defaults, f.name)
        if not dataclasses.is_dataclass(value):
            kind, allowed = _kind(dict(f.metadata), str(f.type))
            yield "", f.name, kind, value, allowed, f"DREAMD_{f.name.upper()}"
            continue
        section = f.name.rstrip("_")
        for sub in dataclasses.fields(value):
            kind, allowed = _kind(dict(sub.metadata), str(sub.type))
            yield (section, sub.name, kind, getattr(value, sub.name), allowed,
                   f"DREAMD_{section.upper()}__{sub.name.upper()}")


def config_reference() -> str:
    from dreamd.config import RENAMED

    comments = example_comments((ROOT / "config.example.toml").read_text(encoding="utf-8"))
    out = [GENERATED, "## Every key\n"]
    current = None
    for section, key, kind, default, allowed, variable in config_keys():
        if section != current:
            current = section
            out.append(f"\n### `[{section}]`\n" if section else "\n### Top level\n")
            out.append("| key | type | default | allowed | environment | what it does |")
            out.append("|---|---|---|---|---|---|")
        out.append(f"| `{key}` | {kind} | {cell(code(_toml(default)))} | {cell(allowed)} | "
                   f"`{variable}` | {cell(comments.get((section, key), ''))} |")
    if RENAMED:
        out.append("\n### Old names still read\n")
        out.append("| old key | means |\n|---|---|")
        for (section, old), new in sorted(RENAMED.items()):
            out.append(f"| `{section}.{old}` | `{section}.{new}` |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- HTTP API


def openapi_document() -> dict[str, Any]:
    """The server's own document, from the app `dreamd serve` runs, built in-process on a
    fresh store in a temporary directory (nothing listens)."""
    from dreamd.config import Config, EmbedConfig
    from dreamd.logger import silent
    from dreamd.serve.app import build
    from dreamd.serve.keyring import Keyring
    from dreamd.serve.memories import Memories

    with tempfile.TemporaryDirectory() as directory:
        config = Config(db=str(Path(directory) / "memory.db"),
                        embed=EmbedConfig(backend="hashing"))
        memories = Memories(config, size=1, create=True)
        try:
            app: Any = build(config, memories, keyring=Keyring("docs" * 8, lambda _: None),
                             log=silent())
            while not hasattr(app, "openapi"):  # the guard (and CORS) wrap the FastAPI app
                app = app.app
            return dict(app.openapi())
        finally:
            memories.close()


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON schema as a short type: `string`, `integer ≥ 1`, `[Hit]`, `Fact | null`."""
    from dreamd.serve.schema import MEANING

    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " \\| ".join(schema_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and \
            isinstance(schema["additionalProperties"], dict):
        return f"object of {schema_type(schema['additionalProperties'])}"
    bounds = []
    if "enum" in schema:
        bounds.append("one of " + ", ".join(code(v) for v in schema["enum"]))
    for key, sign in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"),
                      ("maxLength", "length ≤"), ("minItems", "items ≥"),
                      ("maxItems", "items ≤")):
        if key in schema:
            bounds.append(f"{sign} {schema[key]}")
    if "pattern" in schema:
        bounds.append(MEANING.get(schema["pattern"], f"matches `{schema['pattern']}`"))
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`\n"]
    if op.get("description"):
        out.append(op["description"].strip() + "\n")
    if op.get("security") == []:
        out.append("No token needed.\n")
    params = op.get("parameters", [])
    if params:
        out.append("| parameter | in | required | type | default | description |")
        out.append("|---|---|---|---|---|---|")
        for p in params:
            schema = p.get("schema", {})
            default = code(json.dumps(schema["default"])) if "default" in schema else ""
            out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                       f"| {cell(schema_type(schema))} | {cell(default)} | "
                       f"{cell(p.get('description') or schema.get('description', ''))} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        schema = body["content"]["application/json"]["schema"]
        out.append(f"Body (JSON): {schema_type(schema)}\n")
    out.append("| answer | means | body |")
    out.append("|---|---|---|")
    for status, answer in op.get("responses", {}).items():
        content = answer.get("content", {})
        kinds = [f"{cell(schema_type(c['schema']))}" if c.get("schema") else f"`{mime}`"
                 for mime, c in content.items()]
        out.append(f"| {status} | {cell(answer.get('description', ''))} | "
                   f"{', '.join(kinds) or '—'} |")
    out.append("")
    return out


def _model(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}\n"]
    if schema.get("description"):
        out.append(schema["description"].strip() + "\n")
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    if props:
        out.append("| field | type | required | description |")
        out.append("|---|---|---|---|")
        for field, sub in props.items():
            out.append(f"| `{field}` | {cell(schema_type(sub))} | "
                       f"{'yes' if field in required else 'no'} | "
                       f"{cell(sub.get('description', ''))} |")
        out.append("")
    if schema.get("additionalProperties") is True:
        out.append("Other fields may follow: see the description.\n")
    return out


def http_reference(spec: dict[str, Any] | None = None) -> str:
    spec = spec or openapi_document()
    out = [GENERATED, f"Version {spec['info']['version']} of the document "
           "(`GET /openapi.json` serves the same, with the patterns in full). The routes "
           "come by tag, then the models their bodies and answers use.\n"]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    for tag, operations in by_tag.items():
        out.append(f"## {tag.capitalize()}\n")
        for path, method, op in operations:
            out.extend(_operation(path, method, op))
    out.append("## Models\n")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.extend(_model(name, schema))
    return "\n".join(out)


# ---------------------------------------------------------------------------- metrics

FAMILIES = {"GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter",
            "Histogram": "histogram", "Gauge": "gauge", "Counter": "counter"}


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def metric_calls(source: str) -> Iterator[tuple[str, str, str, list[str]]]:
    """(name, type, help, labels) of every metric dreamd/serve/metrics.py makes, read from
    the calls that make them (their names and help are literals there)."""
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        called = node.func.id if isinstance(node.func, ast.Name) else \
            node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if called not in FAMILIES:
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        name = _literal(node.args[0] if node.args else keywords.get("name"))
        text = _literal(node.args[1] if len(node.args) > 1 else keywords.get("documentation"))
        labels = _literal(node.args[2] if len(node.args) > 2 else keywords.get("labels")) or []
        yield str(name), FAMILIES[called], str(text), list(labels)


def metrics_reference() -> str:
    source = (ROOT / "dreamd" / "serve" / "metrics.py").read_text(encoding="utf-8")
    out = [GENERATED, "| metric | type | labels | what it is |", "|---|---|---|---|"]
    for name, kind, text, labels in metric_calls(source):
        shown = name + ("_bucket, _sum, _count" if kind == "histogram" else "")
        out.append(f"| `{cell(shown)}` | {kind} | {', '.join(f'`{x}`' for x in labels)} | "
                   f"{cell(text)} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- exit codes


def exit_codes() -> Iterator[tuple[str, int, str, str]]:
    """(name, code, what it means, where it is defined) from the EXIT_ constants and the
    comments beside them."""
    for relative in ("dreamd/errors.py", "dreamd/dream/probe.py"):
        lines = (ROOT / relative).read_text(encoding="utf-8").splitlines()
        for line in lines:
            match = re.match(r"(EXIT_[A-Z_]+) = (\d+)\s*(?:#\s*(.*))?$", line)
            if match:
                yield match[1], int(match[2]), match[3] or "", relative


def error_classes() -> Iterator[tuple[str, str, str, str, str]]:
    """(class, parent, exit code, HTTP status, docstring) of every error in
    dreamd/errors.py; the status is the server's own mapping (dreamd/serve/answers.py).
    A backend's error ends a job, not a command or a request: the pass records it."""
    from dreamd import errors
    from dreamd.serve.answers import STATUS

    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, errors.DreamdError):
            parent = value.__mro__[1].__name__ if value is not errors.DreamdError else \
                "Exception"
            doc = " ".join((value.__doc__ or "").split())
            if issubclass(value, errors.BackendError):
                yield name, parent, "—", "—", doc
                continue
            status = next((code for kind, code in STATUS if issubclass(value, kind)), 400)
            yield name, parent, str(value.exit_code), str(status), doc


def exit_reference() -> str:
    out = [GENERATED, "## Exit codes\n", "| code | name | means | defined in |",
           "|---|---|---|---|"]
    for name, number, said, where in exit_codes():
        out.append(f"| {number} | `{name}` | {cell(said)} | `{where}` |")
    out += ["", "## Errors\n",
            "Every failure dreamd reports to a person is one of these: the command line "
            "prints it as one line and exits with its code; the HTTP API answers its status "
            "with `{\"error\": \"<one line>\"}`. A backend's error (—) ends a job, not the "
            "command or the request: the pass records it, `dreamd status` shows it, and a "
            "`--force` pass with a failed job exits 1.\n",
            "| error | is a | exit code | HTTP | means |", "|---|---|---|---|---|"]
    for name, parent, number, status, doc in error_classes():
        out.append(f"| `{name}` | `{parent}` | {number} | {status} | {cell(doc)} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- memory file

APP_WRITES = ("exchanges", "sessions")
APP_READS = ("summaries", "profile", "eras", "narrative", "self_state", "facts")


def fresh_schema() -> dict[str, Any]:
    """The tables, indexes and triggers of a memory file dreamd makes, read back from a
    new one in a temporary directory; and the prior-art layout's own columns."""
    from dreamd.config import Config, EmbedConfig
    from dreamd.memory import Memory
    from dreamd.store.sqlite.schema import CORE_TABLES, MIGRATIONS

    prior = sqlite3.connect(":memory:")
    prior.executescript(CORE_TABLES)
    original = {t: {row[1] for row in prior.execute(f"PRAGMA table_info({t})")}
                for (t,) in prior.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    prior.close()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "memory.db"
        config = Config(db=str(path), embed=EmbedConfig(backend="hashing"))
        Memory(path, config=config, create=True).close()
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                "WHERE name NOT LIKE 'sqlite_%' ORDER BY rowid").fetchall()
            tables = {}
            for kind, name, _, sql in rows:
                if kind == "table" and not (sql or "").upper().startswith("CREATE VIRTUAL") \
                        and not re.match(r".*_(data|idx|content|docsize|config)$", name):
                    tables[name] = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
        finally:
            conn.close()
    return {"tables": tables, "original": original, "objects": rows,
            "migrations": [(m.version, m.name) for m in MIGRATIONS]}


def _columns(name: str, columns: list[Any], original: set[str] | None) -> list[str]:
    out = ["| column | type | null | default | key |" +
           (" added by dreamd |" if original is not None else ""),
           "|---|---|---|---|---|" + ("---|" if original is not None else "")]
    for _, column, kind, notnull, default, pk, *_ in columns:
        added = "" if original is None else (" | " + ("no" if column in original else "yes"))
        out.append(f"| `{column}` | {kind or '—'} | {'NOT NULL' if notnull else 'may be NULL'} "
                   f"| {cell(code(default)) if default is not None else ''} | "
                   f"{'primary' if pk else ''}{added} |")
    return [*out, ""]


def memory_file_reference(schema: dict[str, Any] | None = None) -> str:
    schema = schema or fresh_schema()
    tables, original = schema["tables"], schema["original"]
    out = [GENERATED,
           "## Tables the app writes\n",
           "The app inserts into these as it always did; the columns marked *added by "
           "dreamd* have defaults, so the app's own INSERTs keep working without them.\n"]
    for name in APP_WRITES:
        out += [f"### `{name}`\n", *_columns(name, tables[name], original.get(name, set()))]
    out += ["## Tables the app reads\n",
            "dreamd writes these; the app reads them (or reads memory through the "
            "library, the HTTP API or MCP, which read them).\n"]
    for name in APP_READS:
        out += [f"### `{name}`\n", *_columns(name, tables[name], original.get(name))]
    out += ["## dreamd's own tables\n",
            "Bookkeeping in dreamd's namespace: the app neither writes nor relies on them, "
            "and their columns may change with a migration.\n"]
    for name in tables:
        if name not in APP_WRITES + APP_READS:
            out += [f"??? note \"`{name}`\"\n"]
            out += ["    " + line if line else "" for line in _columns(name, tables[name], None)]
    out += ["## Indexes, triggers and the words index on the app's tables\n",
            "| kind | name | on | definition |", "|---|---|---|---|"]
    for kind, name, table, sql in schema["objects"]:
        if kind in ("index", "trigger") and table in APP_WRITES and sql:
            out.append(f"| {kind} | `{name}` | `{table}` | `{cell(' '.join(sql.split()))}` |")
    out += ["", "## Migrations\n",
            "Each is applied in one transaction together with its `dreamd_migrations` row; "
            "they only add.\n", "| version | what it adds |", "|---|---|"]
    for version, name in schema["migrations"]:
        out.append(f"| {version} | {cell(name)} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- the build

PAGES = {"reference/cli.md": cli_reference,
         "reference/config.md": config_reference,
         "reference/http-api.md": http_reference,
         "reference/metrics.md": metrics_reference,
         "reference/exit-codes.md": exit_reference,
         "reference/memory-file.md": memory_file_reference}


def write_pages() -> None:
    """Append each generated part to its hand-written page's head (its prose)."""
    import mkdocs_gen_files

    for page, render in PAGES.items():
        with mkdocs_gen_files.open(page, "a") as out:
            out.write("\n" + render())


if __name__ == "<run_path>":  # run by mkdocs-gen-files
    write_pages()

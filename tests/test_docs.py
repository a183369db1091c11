"""The documentation site: it builds with --strict, its shell quick start runs as written,
and the references written from the code cover what the code defines.

The HTTP examples (README, docs/how-to/http.md) are not run here: they start
`dreamd serve` in the foreground on a fixed port and need curl; what they show is held by
tests/test_serve.py and tests/test_contract.py against a real server."""

from __future__ import annotations

import dataclasses
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, dreamd_env
from tests.test_readme import block

DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def gen() -> dict[str, Any]:
    """docs/gen_reference.py's functions, as mkdocs-gen-files would run them."""
    return runpy.run_path(str(DOCS / "gen_reference.py"), run_name="gen_reference")


def commands_of(script: str) -> list[str]:
    """The commands of a shell block, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in script.splitlines())
    return [line for line in lines if line]


def test_the_tutorials_demo_is_what_make_demo_runs() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\ndemo:") + 1:].split("\n\n", 1)[0].splitlines()[1:]
    made = [line.strip().replace("$(BIN)/", "").replace("$(DEMO_DB)", "demo/memory.db")
            for line in recipe]
    assert made == commands_of(block(DOCS / "tutorial.md", "## 2. The demo, by hand", "sh"))


def test_the_tutorials_shell_quick_start_runs_as_written(tmp_path: Path) -> None:
    """Steps 2 and 3 of the tutorial in a directory of their own, with this
    environment's dreamd first on PATH."""
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "demo.toml", tmp_path / "examples")
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "dreamd"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dreamd "$@"\n')
    shim.chmod(0o755)
    env = dreamd_env()
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for heading, said in (("## 2. The demo, by hand", "pass"),
                          ("## 3. Ask it", "Biscuit")):
        script = "set -e\n" + block(DOCS / "tutorial.md", heading, "sh")
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (heading, done.stderr[-3000:])
        assert said in done.stdout, (heading, done.stdout[-3000:])


def test_the_readme_draws_the_cycle_the_docs_draw() -> None:
    cycle = (DOCS / "cycle.txt").read_text(encoding="utf-8").rstrip("\n")
    assert cycle in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_stays_an_overview() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    assert "make test" in "\n".join(lines)  # what .ci/run calls


def test_every_config_key_is_in_its_reference(gen: dict[str, Any]) -> None:
    from dreamd.config import Config

    page = gen["config_reference"]()
    count = 0
    for f in dataclasses.fields(Config):
        section = getattr(Config(), f.name)
        keys = [f.name] if not dataclasses.is_dataclass(section) else \
            [sub.name for sub in dataclasses.fields(section)]
        for key in keys:
            assert f"| `{key}` |" in page, key
            count += 1
    assert page.count("\n| `") >= count
    assert "| `idle_minutes` | number | `30.0` | ≥ 0 | `DREAMD_SUMMARIZE__IDLE_MINUTES` |" \
        in page


def test_the_http_reference_has_every_route_of_the_document(gen: dict[str, Any]) -> None:
    spec = gen["openapi_document"]()
    page = gen["http_reference"](spec)
    for path, operations in spec["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page, (method, path)
    for name in spec["components"]["schemas"]:
        assert f"### {name}\n" in page, name
    assert "an id: printable" in page  # the id pattern, in words


def test_every_metric_made_is_in_its_reference(gen: dict[str, Any]) -> None:
    source = (ROOT / "dreamd" / "serve" / "metrics.py").read_text(encoding="utf-8")
    found = list(gen["metric_calls"](source))
    made = len(re.findall(r"\b(?:GaugeMetricFamily|CounterMetricFamily|Histogram)\(", source))
    assert len(found) == made  # no metric whose name the reader could not see
    assert all(name.startswith("dreamd_") and text for name, _, text, _ in found), found
    page = gen["metrics_reference"]()
    assert all(f"`{name}" in page for name, *_ in found)


def test_the_exit_codes_in_words_are_the_codes_defined(gen: dict[str, Any]) -> None:
    """The page's paragraph (moved from the README) names each code the code defines, and
    no other."""
    defined = {number for _, number, _, _ in gen["exit_codes"]()}
    prose = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    said = {int(n) for n in re.findall(r"`(\d+)`", prose)}
    assert said - {130, 143} == defined  # 130 and 143: a second signal, said by the shell


def test_the_memory_file_reference_reads_a_fresh_store(gen: dict[str, Any]) -> None:
    page = gen["memory_file_reference"]()
    for table in ("exchanges", "sessions", "summaries", "facts", "dreamd_runs"):
        assert f"`{table}`" in page, table
    assert "| `user_id` | TEXT | NOT NULL | `'default'` |  | yes |" in page  # sessions'
    assert "dreamd_sessions_owner" in page or "AFTER INSERT ON sessions" in page


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install '.[docs]'; make install has it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index.html", "reference/cli/index.html", "reference/http-api/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "dreamd facts correct" in cli and "Sentinel" not in cli

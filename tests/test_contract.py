"""The HTTP API keeps its OpenAPI document: schemathesis (every check) finds no answer
the document does not declare and no request it misjudges, and a TypeScript client
generated from the document compiles and works against a real server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.served import ROOT, Served, env_for

TOKEN = "contract-token-0123456789abcdef"
CLIENT = ROOT / "tests" / "client"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The sample conversations, dreamed once, behind a token."""
    path = tmp_path_factory.mktemp("contract") / "memory.db"
    for args in (("demo", "--replace"), ("--force",)):
        done = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(path), *args],
                              cwd=ROOT, env=env_for(), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
    server = Served(str(path), token=TOKEN)
    yield server
    assert server.stop() == 0, server.output()


def test_the_document_types_every_answer(served: Served) -> None:
    with served.client() as client:
        spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearer": []}]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            codes = operation["responses"]
            assert "422" not in codes, (method, path)  # refusals are 400s
            for code, answer in codes.items():
                schema = answer["content"].get("application/json", {}).get("schema", {})
                if int(code) >= 400:
                    assert schema == {"$ref": "#/components/schemas/Problem"}, (path, code)
                elif path != "/metrics":
                    assert "$ref" in schema, (method, path, code)  # a named model
            assert {"401", "403"} <= set(codes) or path == "/healthz", (method, path)


def test_schemathesis_finds_nothing(served: Served, tmp_path: Path) -> None:
    """Every check, a bounded budget, a fixed seed: the same cases on every run."""
    st = Path(sys.executable).parent / "st"
    run = subprocess.run(
        [str(st), "--config-file", str(ROOT / "tests" / "schemathesis.toml"), "run",
         f"{served.url}/openapi.json", "--checks", "all",
         "-H", f"Authorization: Bearer {TOKEN}", "--max-examples", "25", "--seed", "7",
         "--no-color", "--report-dir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    summary = [line for line in run.stdout.splitlines() if "generated" in line]
    assert run.returncode == 0, run.stdout[-6000:]
    assert summary and "failures" not in summary[0], summary


def npm() -> str:
    found = shutil.which("npm")
    if found is None or shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("node and npm not found (the TypeScript client check needs them)")
        pytest.skip("node and npm not found: the TypeScript client check needs them")
    return found


def test_a_generated_typescript_client_compiles_and_works(served: Served) -> None:
    tool = npm()
    if not (CLIENT / "node_modules" / ".package-lock.json").exists():
        installed = subprocess.run([tool, "ci", "--no-audit", "--no-fund"], cwd=CLIENT,
                                   capture_output=True, text=True, timeout=600)
        assert installed.returncode == 0, installed.stderr[-3000:]
    build = CLIENT / "build"
    build.mkdir(exist_ok=True)
    with served.client() as client:
        (build / "openapi.json").write_text(client.get("/openapi.json").text)
    steps = [["npx", "openapi-typescript", "build/openapi.json", "-o", "build/api.d.ts"],
             ["npx", "tsc", "-p", "."],
             ["node", "build/client.js", served.url, TOKEN]]
    for step in steps:
        done = subprocess.run(step, cwd=CLIENT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (step, done.stdout[-3000:], done.stderr[-3000:])
    said = json.loads(done.stdout)
    assert len(said["ids"]) == 1 and said["user"] == "ts-app" and said["tokens"] > 0
    assert any("ferns" in line for line in said["recent"])
    assert said["status"] == 404 and said["refusal"].startswith("no user 'nobody-here'")

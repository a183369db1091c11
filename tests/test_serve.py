"""`dreamd serve` and `dreamd mcp`, as real subprocesses spoken to over HTTP (httpx), MCP
(the SDK's own client) and a real browser (headless Chromium)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.served import ROOT, Served, env_for

TOKEN = "test-token-0123456789abcdef"
HOSTILE = ('<script>document.title="pwned"</script>'
           '<img src=x onerror="document.title=\'pwned\'"> I keep bees on the roof')


def dreamd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dreamd", *args], cwd=ROOT,
                          env=env or env_for(), capture_output=True, text=True, timeout=300)


def dreamed(target: str) -> None:
    """A consolidation pass, as the daemon beside the server would run it."""
    done = dreamd("--db", target, "--force")
    assert done.returncode == 0, done.stderr


def one_line_error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["error"] and "\n" not in body["error"]
    assert "Traceback" not in response.text
    return str(body["error"])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample conversations, dreamed once."""
    path = tmp_path_factory.mktemp("served") / "memory.db"
    made = dreamd("--db", str(path), "demo", "--replace")
    assert made.returncode == 0, made.stderr
    dreamed(str(path))
    return path


@pytest.fixture(scope="module")
def guarded(demo: Path) -> Iterator[Served]:
    """The demo file behind a token, with a hostile turn in it."""
    server = Served(str(demo), token=TOKEN)
    with server.client() as client:
        added = client.post("/v1/turns", json={"session": "s03", "role": "user",
                                               "content": HOSTILE})
        assert added.status_code == 201, added.text
    yield server
    assert server.stop() == 0, server.output()


def test_the_api_on_both_engines(target: str) -> None:
    server = Served(target, "--create")
    try:
        with server.client() as client:
            assert client.get("/readyz").json()["ready"] is True
            turns = [{"user": "ana", "session": "ana-1", "role": "user",
                      "content": "I adopted a greyhound called Pilot on Saturday.",
                      "created_at": "2026-03-07T10:00:00Z"},
                     {"user": "ana", "session": "ana-1", "role": "assistant",
                      "content": "Pilot is a lovely name for a greyhound!",
                      "created_at": "2026-03-07T10:00:05Z"},
                     {"user": "bo", "session": "bo-1", "role": "user",
                      "content": "My greyhound Comet hates the rain.",
                      "created_at": "2026-03-08T09:00:00"}]
            stored = client.post("/v1/turns", json={"turns": turns})
            assert stored.status_code == 201, stored.text
            assert len(stored.json()["ids"]) == 3
            one = client.post("/v1/turns", json={"user": "ana", "session": "ana-1",
                                                 "role": "user", "content": "Pilot sleeps a lot."})
            assert one.status_code == 201
            taken = client.post("/v1/turns", json={"user": "bo", "session": "ana-1",
                                                   "role": "user", "content": "mine now"})
            assert "belongs to another user" in one_line_error(taken, 409)
            dreamed(target)

            users = client.get("/v1/users").json()["users"]
            assert set(users) == {"ana", "bo"} and users["ana"]["turns"] == 3
            hits = client.get("/v1/recall", params={"user": "ana", "q": "greyhound", "k": 5})
            found = hits.json()["hits"]
            assert found and {h["session"] for h in found} == {"ana-1"}  # never bo's
            assert "Pilot" in found[0]["content"] and found[0]["when"]
            block = client.get("/v1/context", params={"session": "ana-1", "q": "dog",
                                                      "budget": 300}).json()
            assert block["user"] == "ana" and 0 < block["tokens"] <= 300
            assert "Pilot" in block["text"] and "Comet" not in block["text"]
            assert set(block["sections"]) >= {"facts", "recent"}
            between = client.get("/v1/context", params={"user": "ana", "q": "greyhound"})
            assert between.status_code == 200 and "Comet" not in between.json()["text"]

            memory = client.get("/v1/users/ana/memory").json()
            assert memory["user"] == "ana" and memory["facts"]
            fact = next(f for f in memory["facts"] if "Pilot" in f["statement"])
            assert fact["current"] and fact["from_turns"][0]["session"] == "ana-1"
            exported = client.get("/v1/users/ana/export").json()
            assert exported["format"] == "dreamd-export/1" and exported["facts"]
            status = client.get("/v1/status", params={"runs": 1}).json()
            assert status["runs"][0]["outcome"] == "ok" and "drives" in status
            metrics = client.get("/metrics").text
            assert 'dreamd_drive_level{drive="continuity"}' in metrics
            assert "dreamd_last_pass_seconds" in metrics and "dreamd_quarantined" in metrics
            spec = client.get("/openapi.json").json()
            assert {"/v1/turns", "/v1/recall", "/v1/context", "/v1/users/{user}",
                    "/v1/status"} <= set(spec["paths"])

            dry = client.delete("/v1/users/bo", params={"dry_run": "true"}).json()
            assert dry["dry_run"] is True and dry["turns"] == 1
            gone = client.delete("/v1/users/bo").json()
            assert gone["turns"] == 1
            assert "no user 'bo'" in one_line_error(client.get("/v1/users/bo/memory"), 404)
    finally:
        assert server.stop() == 0, server.output()


def test_a_token_guards_every_route_but_health(guarded: Served) -> None:
    with guarded.client(token="") as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        for path in ("/v1/users", "/v1/status", "/metrics", "/readyz", "/openapi.json"):
            one_line_error(anonymous.get(path), 401)
        one_line_error(anonymous.post("/mcp", json={}), 401)
        assert anonymous.get("/").status_code == 401  # a sign-in form, not the memory
        assert "Sam" not in anonymous.get("/users/default").text
    with guarded.client(token="not-the-token-0123456789") as wrong:
        one_line_error(wrong.get("/v1/users"), 401)
    with guarded.client() as client:
        assert client.get("/v1/users").status_code == 200
    with guarded.client(token="", follow_redirects=False) as browser:
        signed = browser.get("/", params={"token": TOKEN})
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        assert "HttpOnly" in signed.headers["set-cookie"]
        assert "SameSite=Strict" in signed.headers["set-cookie"]
        assert browser.get("/").status_code == 200  # the cookie, from now on


def test_requests_are_bounded_and_checked(guarded: Served) -> None:
    with guarded.client() as client:
        assert "k" in one_line_error(client.get("/v1/recall", params={"q": "x", "k": 5000}),
                                     400)
        one_line_error(client.get("/v1/context", params={"budget": 10**9}), 400)
        one_line_error(client.get("/v1/recall", params={"q": "x", "user": "a\x01b"}), 400)
        one_line_error(client.get("/v1/recall", params={"q": "x", "user": " padded"}), 400)
        one_line_error(client.post("/v1/turns", json={"session": "s", "role": "user",
                                                      "content": "   "}), 400)
        one_line_error(client.post("/v1/turns", json={"session": "s", "role": "<b>",
                                                      "content": "hi"}), 400)
        one_line_error(client.post("/v1/turns", content=b"{not json",
                                   headers={"content-type": "application/json"}), 400)
        huge = {"session": "s", "role": "user", "content": "x" * (1024 * 1024 + 10)}
        assert "larger than" in one_line_error(client.post("/v1/turns", json=huge), 413)
        many = {"turns": [{"session": "s", "role": "user", "content": "hi"}] * 501}
        one_line_error(client.post("/v1/turns", json=many), 413)
        assert "no user" in one_line_error(client.get("/v1/users/nobody/memory"), 404)
        one_line_error(client.delete("/v1/users/default", params={"before": "soon"}), 400)
        evil = client.get("/v1/users", headers={"host": "attacker.example"})
        assert "not to Host" in one_line_error(evil, 403)
        forged = client.post("/v1/turns", headers={"origin": "https://attacker.example"},
                             json={"session": "s", "role": "user", "content": "hi"})
        one_line_error(forged, 403)
        assert client.get("/v1/users").json()["uncounted_turns"] >= 1  # nothing above landed


def test_no_token_means_loopback_only(demo: Path) -> None:
    refused = dreamd("--db", str(demo), "serve", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "no API token" in refused.stderr
    short = dreamd("--db", str(demo), "serve", "--port", "0",
                   env=env_for(DREAMD_API_TOKEN="short"))
    assert short.returncode == 2 and "shorter than 16" in short.stderr


def test_a_forget_through_the_api_erases_what_the_command_erases(demo: Path,
                                                                   tmp_path: Path) -> None:
    by_command, by_api = tmp_path / "command.db", tmp_path / "api.db"
    for copy in (by_command, by_api):
        shutil.copy(demo, copy)
    forgot = dreamd("--db", str(by_command), "forget", "--user", "default",
                    "--session", "s03", "--json")
    assert forgot.returncode == 0, forgot.stderr
    server = Served(str(by_api))
    try:
        with server.client() as client:
            answer = client.delete("/v1/users/default", params={"session": "s03"})
            assert answer.status_code == 200, answer.text
    finally:
        assert server.stop() == 0
    assert answer.json() == json.loads(forgot.stdout)
    assert _rows(by_api) == _rows(by_command)


def _rows(path: Path) -> dict[str, list[Any]]:
    """Every table's rows, without the columns that say when something was done."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = "
                                             "'table' AND name NOT LIKE '%fts%' "
                                             "AND name NOT IN ('dreamd_runs', 'dreamd_state', "
                                             "'dreamd_erasures') ORDER BY name")]
        return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in tables}
    finally:
        conn.close()


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium not found (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not found (Debian: apt install chromium)")
    return found


def browse(url: str, *args: str) -> str:
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1100,1400", *args, url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_page_shows_memory_and_runs_no_turn_as_code(guarded: Served,
                                                         tmp_path: Path) -> None:
    sign_in = f"?token={TOKEN}"
    index = browse(f"{guarded.url}/{sign_in}", "--dump-dom")
    assert ">default<" in index and "<svg" in index and "Why it dreamed" in index
    assert 'class="ran"' in index  # the chart marks where jobs ran
    person = browse(f"{guarded.url}/users/default{sign_in}", "--dump-dom")
    assert "Profile" in person and "Sam" in person
    assert 'class="source" href="/users/default/sessions/' in person  # a fact's turns
    session = browse(f"{guarded.url}/users/default/sessions/s03{sign_in}", "--dump-dom")
    assert "<title>s03 · dreamd</title>" in session  # no script renamed the page
    assert "&lt;script&gt;document.title" in session and "I keep bees" in session
    assert "<script" not in session and "<img" not in session
    shot = tmp_path / "page.png"
    browse(f"{guarded.url}/{sign_in}", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000


def test_mcp_over_stdio(demo: Path, tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    path = tmp_path / "memory.db"
    shutil.copy(demo, path)

    async def session() -> tuple[set[str], Any, Any, Any]:
        params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                       args=["-m", "dreamd", "--db", str(path), "mcp"],
                                       env=env_for())
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            stored = await client.call_tool("remember", {
                "session": "mcp-1", "role": "user", "user": "default",
                "content": "My telescope arrives on Friday."})
            found = await client.call_tool("recall", {"query": "my telescope arrives on Friday",
                                                      "k": 3})
            block = await client.call_tool("context", {"query": "biscuit", "budget": 200})
            wrong = await client.call_tool("recall", {"query": "x", "k": 10**6})
            return tools, stored, (found, block), wrong

    tools, stored, (found, block), wrong = asyncio.run(session())
    assert tools == {"recall", "context", "remember", "memory", "facts", "fact_history"}
    # no forget, and no change to a fact, by default
    assert not stored.is_error and stored.structured_content["id"] > 0
    assert any("telescope" in h["content"] for h in found.structured_content["hits"])
    assert 0 < block.structured_content["tokens"] <= 200
    assert wrong.is_error and wrong.content[0].text.startswith("k: ")
    assert "\n" not in wrong.content[0].text and "100" in wrong.content[0].text


def test_mcp_over_http_needs_the_token(guarded: Served) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def session(token: str) -> Any:
        headers = {"authorization": f"Bearer {token}"}
        async with (create_mcp_http_client(headers=headers) as http,
                    Client(streamable_http_client(f"{guarded.url}/mcp", http_client=http))
                    as client):
            return await client.call_tool("memory", {})

    read = asyncio.run(session(TOKEN))
    assert not read.is_error and "new flat" in (read.structured_content["profile"] or "")
    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's task groups wrap it
        asyncio.run(session("not-the-token-0123456789"))
    assert {type(e).__name__ for e in _leaves(refused.value)} == {"MCPError"}
    with guarded.client(token="not-the-token-0123456789") as wrong:
        one_line_error(wrong.post("/mcp", json={}), 401)  # what the SDK was answered


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_a_users_requests_share_one_connection(demo: Path) -> None:
    """So each user's recall matrix is built once, on the connection that serves them."""
    from dreamd.config import load
    from dreamd.serve.memories import Memories

    memories = Memories(load(None, environ=env_for(), db=str(demo)), size=4)
    try:
        with memories.memory("ana") as first:
            pass
        with memories.memory("ana") as again:
            assert again is first
        seen = set()
        for _ in range(8):
            with memories.memory() as any_one:
                seen.add(id(any_one))
        assert len(seen) == 4  # the others take turns
    finally:
        memories.close()

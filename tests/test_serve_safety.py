"""`dreamd serve` as an attacker and a multi-user app meet it: no DNS rebinding, no
foreign origin, no other user's name or memory, every id erasable, no secret shown, no
date that breaks it, no framing. A real server in a subprocess, spoken to over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.served import ROOT, Served, env_for

TURN = {"session": "s", "role": "user", "content": "hi"}


def dreamd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dreamd", *args], cwd=ROOT,
                          env=env or env_for(), capture_output=True, text=True, timeout=300)


def names_anyone(error: str) -> bool:
    """Whether an error names a user who is there (bo, or the default user)."""
    return re.search(r"\b(bo|default)\b", error) is not None


def post(client: Any, **turn: Any) -> Any:
    return client.post("/v1/turns", json={**TURN, **turn})


@pytest.fixture(scope="module")
def open_server(two_people: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Served]:
    """No token: loopback only, as a fresh install runs it (on a copy: tests add turns)."""
    path = tmp_path_factory.mktemp("open") / "memory.db"
    shutil.copy(two_people, path)
    server = Served(str(path))
    yield server
    assert server.stop() == 0, server.output()


def test_a_rebound_host_is_refused(open_server: Served) -> None:
    """A name that begins like a loopback address is not one (DNS rebinding)."""
    port = open_server.url.rsplit(":", 1)[1]
    evil = f"127.0.0.1.rebind.attacker.example:{port}"
    headers = {"host": evil, "origin": f"http://{evil}"}
    with open_server.client() as client:
        for method, path in (("GET", "/v1/users/bo/export"), ("POST", "/v1/turns"),
                             ("DELETE", "/v1/users/bo"), ("GET", "/")):
            answer = client.request(method, path, headers=headers,
                                    json=TURN if method == "POST" else None)
            assert answer.status_code == 403, (method, path, answer.text)
        assert client.get("/v1/users/bo/export").status_code == 200  # bo is still there
        for host in ("127.0.0.1", "127.1.2.3", "localhost", "[::1]"):
            assert client.get("/healthz", headers={"host": f"{host}:{port}"}).status_code == 200


def test_an_origin_on_another_port_is_refused(open_server: Served) -> None:
    port = open_server.url.rsplit(":", 1)[1]
    with open_server.client() as client:
        for origin in ("http://127.0.0.1:3000", "http://localhost:3000", "http://127.0.0.1",
                       f"https://127.0.0.1:{port}"):
            answer = client.post("/v1/turns", json=TURN, headers={"origin": origin})
            assert answer.status_code == 403, (origin, answer.text)
        same = client.post("/v1/turns", json=TURN, headers={"origin": open_server.url})
        assert same.status_code == 201, same.text


def test_an_unknown_user_is_not_told_who_else_is_there(open_server: Served) -> None:
    with open_server.client() as client:
        for path in ("/v1/users/nobody/memory", "/v1/users/nobody/export"):
            answer = client.get(path)
            assert answer.status_code == 404 and not names_anyone(answer.json()["error"])
        erased = client.delete("/v1/users/nobody")
        assert erased.status_code == 404 and not names_anyone(erased.json()["error"])


def test_mcp_errors_name_no_other_user(two_people: Path) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from dreamd.config import load
    from dreamd.serve import mcp
    from dreamd.serve.memories import Memories

    config = load(None, environ=env_for(), db=str(two_people))
    memories = Memories(config, size=1)
    try:
        server = mcp.make(memories, config)
        with pytest.raises(ToolError) as refused:
            asyncio.run(server.call_tool("recall", {"query": "cat", "user": "nobody"}))
        assert "nobody" in str(refused.value) and not names_anyone(str(refused.value))
    finally:
        memories.close()


def test_a_new_conversation_gets_no_one_elses_memory(open_server: Served) -> None:
    with open_server.client() as client:
        mine = client.get("/v1/context", params={"session": "ana-1"}).json()
        assert "greyhound" in mine["text"].lower() or "Pilot" in mine["text"]
        new = client.get("/v1/context", params={"session": "brand-new-chat", "q": "pets"})
        assert new.status_code == 200, new.text
        text = new.json()["text"]
        assert "Pilot" not in text and "Lisbon" not in text and "Comet" not in text
        newcomer = client.get("/v1/context", params={"user": "cleo", "q": "pets"})
        assert newcomer.status_code == 200, newcomer.text
        assert newcomer.json()["tokens"] == 0 or "Pilot" not in newcomer.json()["text"]
        first = client.get("/v1/context", params={"user": "bo", "session": "bo-2"})
        assert first.status_code == 200 and "Pilot" not in first.json()["text"]
        stolen = client.get("/v1/context", params={"user": "bo", "session": "ana-1"})
        assert stolen.status_code == 404


def test_every_user_id_the_api_takes_can_be_erased(tmp_path: Path) -> None:
    server = Served(str(tmp_path / "memory.db"), "--create")
    try:
        with server.client() as client:
            for user in ("a/b", "../etc", "x/memory"):
                assert post(client, user=user, session=f"{user}-1").status_code == 201
                quoted = user.replace("/", "%2F")
                memory = client.get(f"/v1/users/{quoted}/memory")
                assert memory.status_code == 200 and memory.json()["user"] == user
                assert client.get(f"/v1/users/{quoted}/export").status_code == 200
                gone = client.delete(f"/v1/users/{quoted}")
                assert gone.status_code == 200 and gone.json()["turns"] == 1, gone.text
            for user in (".", ".."):
                assert post(client, user=user, session="dots").status_code == 400
            assert client.get("/v1/users").json()["users"] == {}
    finally:
        assert server.stop() == 0, server.output()


def test_a_base_url_with_credentials_is_not_shown(two_people: Path) -> None:
    env = env_for(DREAMD_COMPLETER__BACKEND="openai", DREAMD_COMPLETER__MODEL="m",
                  DREAMD_COMPLETER__BASE_URL="http://alice:s3cret-pw@llm.internal:8000/v1")
    shown = dreamd("--db", str(two_people), "status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "s3cret-pw" not in shown.stdout and "llm.internal:8000" in shown.stdout
    server = Served(str(two_people), env=env)
    try:
        with server.client() as client:
            status = client.get("/v1/status").text
            assert "s3cret-pw" not in status and "llm.internal:8000" in status
    finally:
        assert server.stop() == 0, server.output()


def test_a_date_out_of_range_is_bad_input(open_server: Served, two_people: Path) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from dreamd.config import load
    from dreamd.serve import mcp
    from dreamd.serve.memories import Memories

    for when in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
        with open_server.client() as client:
            answer = post(client, created_at=when)
            assert answer.status_code == 400, answer.text
            assert "created_at" in answer.json()["error"]
        config = load(None, environ=env_for(), db=str(two_people))
        memories = Memories(config, size=1)
        try:
            with pytest.raises(ToolError) as refused:
                asyncio.run(mcp.make(memories, config).call_tool("remember", {
                    "session": "s", "role": "user", "content": "hi", "created_at": when}))
            assert "created_at" in str(refused.value)
        finally:
            memories.close()


def test_every_answer_carries_security_headers(two_people: Path) -> None:
    server = Served(str(two_people), token="test-token-0123456789abcdef")
    try:
        with server.client() as client, server.client(token="") as anonymous:
            answers = [client.get("/"), client.get("/users/bo"), client.get("/v1/users"),
                       client.get("/v1/users/nobody/memory"), anonymous.get("/"),
                       anonymous.get("/v1/users"), client.get("/healthz")]
            for answer in answers:
                headers = answer.headers
                assert headers.get("x-frame-options") == "DENY", answer.url
                assert headers.get("x-content-type-options") == "nosniff", answer.url
                assert "frame-ancestors 'none'" in headers.get(
                    "content-security-policy", ""), answer.url
                assert headers.get("referrer-policy") == "no-referrer", answer.url
    finally:
        assert server.stop() == 0, server.output()


OPERATOR = "operator-token-0123456789abcdef"


def issued(db: Path, *args: str) -> str:
    made = dreamd("--db", str(db), "tokens", "add", *args)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("dmd_") and "\n" not in token
    return token


@pytest.fixture(scope="module")
def scoped(two_people: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Served, Path, dict[str, str]]]:
    """A copy of the two people behind an operator token, with tokens for Ana alone."""
    path = tmp_path_factory.mktemp("scoped") / "memory.db"
    shutil.copy(two_people, path)
    given = {"read": issued(path, "--user", "default", "--name", "agent"),
             "write": issued(path, "--user", "default", "--scope", "read", "--scope", "write"),
             "erase": issued(path, "--user", "default", "--scope", "erase")}
    server = Served(str(path), token=OPERATOR)
    yield server, path, given
    assert server.stop() == 0, server.output()


def test_a_scoped_token_reaches_its_own_users_alone(
        scoped: tuple[Served, Path, dict[str, str]]) -> None:
    server, _, given = scoped
    with server.client(token=given["read"]) as agent:
        assert agent.get("/v1/users/default/memory").status_code == 200
        other, unknown = agent.get("/v1/users/bo/memory"), agent.get("/v1/users/zed/memory")
        assert other.status_code == unknown.status_code == 404
        assert other.json()["error"].replace("bo", "X") == unknown.json()["error"].replace(
            "zed", "X")  # another user reads as no user
        assert "Comet" not in agent.get("/v1/recall", params={"q": "cat"}).text
        assert agent.get("/v1/recall", params={"q": "cat", "user": "bo"}).status_code == 404
        assert agent.get("/v1/context", params={"session": "bo-1"}).status_code == 404
        for path in ("/v1/users", "/v1/status", "/metrics"):
            assert agent.get(path).status_code == 403, path
        assert agent.delete("/v1/users/default").status_code == 403
        assert agent.delete("/v1/users/bo").status_code == 404
        assert post(agent, session="ana-9").status_code == 403  # read only
    with server.client(token=given["write"]) as app:
        assert post(app, session="ana-9").status_code == 201
        assert post(app, session="bo-1").status_code == 404  # bo's session
        assert post(app, user="bo", session="bo-7").status_code == 404
    with server.client() as operator:
        assert operator.get("/v1/users/bo/memory").status_code == 200
        assert operator.get("/v1/users").json()["users"]["bo"]["turns"] == 1


def test_an_erase_token_erases_and_a_revoked_one_is_refused(
        scoped: tuple[Served, Path, dict[str, str]], tmp_path: Path) -> None:
    server, path, given = scoped
    with server.client(token=given["erase"]) as cleaner:
        dry = cleaner.delete("/v1/users/default", params={"dry_run": "true"})
        assert dry.status_code == 200 and dry.json()["dry_run"] is True
        assert cleaner.get("/v1/users/default/memory").status_code == 403  # erase only
    listed = dreamd("--db", str(path), "tokens", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["scopes"] for r in rows] == [["read"], ["read", "write"], ["erase"]]
    # A token reads dmd_<id>_<secret>, and the secret may hold "_" itself.
    secrets = [token.split("_", 2)[2] for token in given.values()]
    assert all(secret not in listed.stdout for secret in secrets)
    stored = path.read_bytes() + (path.parent / "memory.db-wal").read_bytes()
    assert not any(secret.encode() in stored for secret in secrets)
    revoked = dreamd("--db", str(path), "tokens", "revoke", str(rows[2]["id"]))
    assert revoked.returncode == 0, revoked.stderr
    again = dreamd("--db", str(path), "tokens", "revoke", str(rows[2]["id"]))
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    with server.client(token=given["erase"]) as cleaner:
        give_up = time.monotonic() + 60
        while cleaner.delete("/v1/users/default", params={"dry_run": "true"}
                             ).status_code != 401:
            assert time.monotonic() < give_up, "a revoked token still opens memory"
            time.sleep(0.5)


def test_tokens_without_an_operator_token_refuse_to_serve(
        scoped: tuple[Served, Path, dict[str, str]]) -> None:
    _, path, _ = scoped
    refused = dreamd("--db", str(path), "serve", "--port", "0")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "no operator token" in refused.stderr


def test_mcp_over_http_keeps_a_tokens_scope(
        scoped: tuple[Served, Path, dict[str, str]]) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    server, _, given = scoped

    async def calls() -> list[Any]:
        headers = {"authorization": f"Bearer {given['read']}"}
        async with (create_mcp_http_client(headers=headers) as http,
                    Client(streamable_http_client(f"{server.url}/mcp", http_client=http))
                    as client):
            return [await client.call_tool("memory", {}),
                    await client.call_tool("memory", {"user": "bo"}),
                    await client.call_tool("remember", {"session": "ana-1", "role": "user",
                                                        "content": "hello"})]

    mine, other, write = asyncio.run(calls())
    assert not mine.is_error and mine.structured_content["user"] == "default"
    assert other.is_error and "no user 'bo'" in other.content[0].text
    assert write.is_error and "may not write" in write.content[0].text


def test_users_and_sessions_come_a_page_at_a_time(open_server: Served) -> None:
    with open_server.client() as client:
        seen, after = [], None
        while True:
            page = client.get("/v1/users", params={"limit": 1, **(
                {"after": after} if after else {})}).json()
            assert len(page["users"]) <= 1
            seen += list(page["users"])
            if page["next"] is None:
                break
            after = page["next"]
        assert seen == sorted(client.get("/v1/users").json()["users"]) == ["bo", "default"]
        first = client.get("/v1/users/default/sessions", params={"limit": 1}).json()
        assert [s["session_id"] for s in first["sessions"]] == ["ana-1"]
        rest = client.get("/v1/users/default/sessions", params={"after": "ana-1"}).json()
        assert "ana-1" not in {s["session_id"] for s in rest["sessions"]}
        assert (first["next"] is None) == (rest["sessions"] == [])
        assert client.get("/v1/users/zed/sessions").status_code == 404
        index = client.get("/", params={"after": "bo"}).text
        assert ">default<" in index and ">bo<" not in index
        assert index.index("Drives over the last passes") < index.index("<h2>Users</h2>")

"""`dreamd serve` as an attacker and a multi-user app meet it: no DNS rebinding, no
foreign origin, no other user's name or memory, every id erasable, no secret shown, no
date that breaks it, no framing. A real server in a subprocess, spoken to over HTTP."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
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
def two_people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ana (the default user, single-user style: no user named) and Bo, dreamed once."""
    path = tmp_path_factory.mktemp("safety") / "memory.db"
    server = Served(str(path), "--create")
    try:
        with server.client() as client:
            turns = [{"session": "ana-1", "role": "user",
                      "content": "I adopted a greyhound called Pilot on Saturday.",
                      "created_at": "2026-03-07T10:00:00Z"},
                     {"session": "ana-1", "role": "user",
                      "content": "I work as a marine biologist in Lisbon.",
                      "created_at": "2026-03-07T10:01:00Z"},
                     {"user": "bo", "session": "bo-1", "role": "user",
                      "content": "My cat Comet hates the rain.",
                      "created_at": "2026-03-08T09:00:00Z"}]
            assert client.post("/v1/turns", json={"turns": turns}).status_code == 201
    finally:
        assert server.stop() == 0, server.output()
    done = dreamd("--db", str(path), "--force")
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def open_server(two_people: Path) -> Iterator[Served]:
    """No token: loopback only, as a fresh install runs it."""
    server = Served(str(two_people))
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
    from dreamd.serve.pool import Pool

    config = load(None, environ=env_for(), db=str(two_people))
    pool = Pool(config, size=1)
    try:
        server = mcp.make(pool, config)
        with pytest.raises(ToolError) as refused:
            asyncio.run(server.call_tool("recall", {"query": "cat", "user": "nobody"}))
        assert "nobody" in str(refused.value) and not names_anyone(str(refused.value))
    finally:
        pool.close()


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
    from dreamd.serve.pool import Pool

    for when in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
        with open_server.client() as client:
            answer = post(client, created_at=when)
            assert answer.status_code == 400, answer.text
            assert "created_at" in answer.json()["error"]
        config = load(None, environ=env_for(), db=str(two_people))
        pool = Pool(config, size=1)
        try:
            with pytest.raises(ToolError) as refused:
                asyncio.run(mcp.make(pool, config).call_tool("remember", {
                    "session": "s", "role": "user", "content": "hi", "created_at": when}))
            assert "created_at" in str(refused.value)
        finally:
            pool.close()


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

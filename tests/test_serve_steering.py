"""A person's word over HTTP and MCP: a user's facts a page at a time; correcting,
retracting, pinning, adding and reverting, each with the version it read (a stale one is
412); a token's scopes hold. A real server in a subprocess."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.served import ROOT, Served, env_for

OPERATOR = "operator-token-0123456789abcdef"


@pytest.fixture(scope="module")
def served(two_people: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Served, dict[str, str]]]:
    path = tmp_path_factory.mktemp("steering") / "memory.db"
    shutil.copy(two_people, path)
    tokens = {}
    for scope, scopes in (("read", ["--scope", "read"]),
                          ("write", ["--scope", "read", "--scope", "write"])):
        made = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(path), "tokens",
                               "add", "--user", "default", *scopes, "--name", f"ana-{scope}"],
                              cwd=ROOT, env=env_for(), capture_output=True, text=True,
                              timeout=120)
        assert made.returncode == 0, made.stderr
        tokens[scope] = made.stdout.strip()
    server = Served(str(path), token=OPERATOR,
                    env=env_for(DREAMD_SERVE__MCP_CORRECTIONS="true"))
    yield server, tokens
    assert server.stop() == 0, server.output()


def facts_of(client: Any, user: str = "default", **params: Any) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/users/{user}/facts", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["facts"])


def test_a_person_corrects_retracts_pins_and_reverts(served: tuple[Served, dict[str, str]]
                                                     ) -> None:
    server, _ = served
    with server.client() as client:
        listed = facts_of(client)
        work = next(f for f in listed if "Lisbon" in f["statement"])
        dog = next(f for f in listed if "Pilot" in f["statement"])
        fixed = client.put(f"/v1/users/default/facts/{work['id']}", json={
            "statement": "Ana works as a marine biologist in Porto.",
            "version": work["version"], "why": "moved north"})
        assert fixed.status_code == 200, fixed.text
        assert fixed.json()["origin"].startswith("person:") and fixed.json()["current"]
        stale = client.put(f"/v1/users/default/facts/{work['id']}", json={
            "statement": "Ana works in Faro.", "version": work["version"]})
        assert stale.status_code == 412 and list(stale.json()) == ["error"]
        gone = client.post(f"/v1/users/default/facts/{dog['id']}/retract",
                           json={"version": dog["version"], "why": "never had a dog"})
        assert gone.status_code == 200 and gone.json()["withdrawn"] == "retracted"
        block = client.get("/v1/context", params={"user": "default", "q": "dog"}).json()
        assert "Porto" in block["text"] and "Pilot" not in "".join(block["sections"].get(
            "facts", []))
        added = client.post("/v1/users/default/facts", json={
            "statement": "Ana is allergic to penicillin."})
        assert added.status_code == 201, added.text
        pinned = client.post(f"/v1/users/default/facts/{added.json()['id']}/pin", json={})
        assert pinned.status_code == 200 and pinned.json()["pinned"] is True
        history = client.get(f"/v1/users/default/facts/{dog['id']}/history").json()
        [retraction] = history["corrections"]
        assert retraction["action"] == "retract" and retraction["why"] == "never had a dog"
        assert retraction["made_by"] == "operator"
        undone = client.post(f"/v1/users/default/corrections/{retraction['id']}/revert",
                             json={})
        assert undone.status_code == 201 and undone.json()["reverts"] == retraction["id"]
        assert any("Pilot" in f["statement"] for f in facts_of(client))
        assert client.post(f"/v1/users/default/corrections/{retraction['id']}/revert",
                           json={}).status_code == 409  # reverted already
        everything = facts_of(client, history="true")
        assert len(everything) > len(facts_of(client))  # the corrected words, as history


def test_facts_come_a_page_at_a_time(served: tuple[Served, dict[str, str]]) -> None:
    server, _ = served
    with server.client() as client:
        seen, after = [], 0
        while True:
            page = client.get("/v1/users/default/facts", params={"limit": 1, "after": after})
            body = page.json()
            seen += [f["id"] for f in body["facts"]]
            if body["next"] is None:
                break
            after = body["next"]
        assert seen == sorted(seen) and seen == [f["id"] for f in facts_of(client)]


def test_scopes_and_other_users_hold_for_facts(served: tuple[Served, dict[str, str]]) -> None:
    server, tokens = served
    with server.client() as client:
        bos = facts_of(client, "bo")
        mine = facts_of(client)
    with server.client(token=tokens["read"]) as reader:
        assert len(facts_of(reader)) == len(mine)
        assert reader.get("/v1/users/bo/facts").status_code == 404
        assert reader.post(f"/v1/users/default/facts/{mine[0]['id']}/pin",
                           json={}).status_code == 403
    with server.client(token=tokens["write"]) as writer:
        theirs = writer.post(f"/v1/users/default/facts/{bos[0]['id']}/pin", json={})
        assert theirs.status_code == 404  # bo's fact, asked for as Ana's: no such fact
        assert writer.post(f"/v1/users/bo/facts/{bos[0]['id']}/pin", json={}
                           ).status_code == 404
        fact = f"/v1/users/default/facts/{mine[0]['id']}"
        pinned = writer.post(f"{fact}/pin", json={"version": mine[0]["version"]})
        assert pinned.status_code == 200 and pinned.json()["pinned"] is True
        unpinned = writer.post(f"{fact}/unpin", json={"version": pinned.json()["version"]})
        assert unpinned.status_code == 200, unpinned.text
        assert unpinned.json()["pinned"] is False


def test_mcp_offers_the_same_operations(served: tuple[Served, dict[str, str]]) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    server, tokens = served

    async def calls(token: str) -> tuple[set[str], list[Any]]:
        headers = {"authorization": f"Bearer {token}"}
        async with (create_mcp_http_client(headers=headers) as http,
                    Client(streamable_http_client(f"{server.url}/mcp", http_client=http))
                    as client):
            names = {t.name for t in (await client.list_tools()).tools}
            listed = await client.call_tool("facts", {"user": "default"})
            first = listed.structured_content["facts"][0]
            return names, [listed, await client.call_tool("pin_fact", {
                "user": "default", "fact_id": first["id"], "version": first["version"]}),
                await client.call_tool("pin_fact", {
                    "user": "default", "fact_id": first["id"], "version": first["version"]})]

    names, (listed, pinned, stale) = asyncio.run(calls(tokens["write"]))
    assert {"facts", "fact_history", "correct_fact", "retract_fact", "pin_fact",
            "add_fact", "revert_correction"} <= names
    assert not listed.is_error and not pinned.is_error
    assert pinned.structured_content["pinned"] is True
    assert stale.is_error and "version" in stale.content[0].text
    _, (_, refused, _) = asyncio.run(calls(tokens["read"]))
    assert refused.is_error and "may not write" in refused.content[0].text


def form_fields(page: str, action: str) -> dict[str, str]:
    """The hidden fields and prefilled inputs of the page's form that posts to `action`."""
    start = page.index(f'action="{action}"')
    form = page[start:page.index("</form>", start)]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))


def test_the_page_changes_a_fact_with_a_form_tied_to_its_cookie(
        served: tuple[Served, dict[str, str]]) -> None:
    server, _ = served
    with server.client(token="", follow_redirects=False) as browser:
        assert browser.get("/", params={"token": OPERATOR}).status_code == 303  # signed in
        shown = browser.get("/users/default")
        assert shown.status_code == 200 and "dreamd_page" in shown.headers["set-cookie"]
        fact = next(f for f in facts_of_page(server) if "Porto" in f["statement"]
                    or "Lisbon" in f["statement"])
        action = f"/users/default/facts/{fact['id']}/correct"
        sent = {**form_fields(shown.text, action), "statement": "Ana works in Coimbra."}
        assert sent["version"] == str(fact["version"]) and len(sent["csrf"]) == 64
        forged = browser.post(action, data={**sent, "csrf": "0" * 64})
        assert forged.status_code == 403 and "<form" not in forged.text
        with server.client(token="", follow_redirects=False) as stranger:
            stranger.get("/", params={"token": OPERATOR})
            stranger.get("/users/default")  # a page of its own, another cookie
            assert stranger.post(action, data=sent).status_code == 403
        done = browser.post(action, data=sent)
        assert done.status_code == 303, done.text
        assert done.headers["location"].startswith("/users/default#fact-")
        assert any(f["statement"] == "Ana works in Coimbra." for f in facts_of_page(server))
        again = browser.post(action, data=sent)  # the version it read has moved on
        assert again.status_code in (409, 412) and "Not changed" in again.text
        confirm = browser.get(f"/users/default/facts/{fact['id']}/retract")
        assert confirm.status_code == 404 and "Not changed" in confirm.text  # withdrawn
        history = browser.get(f"/users/default/facts/{fact['id']}/history")
        assert "Coimbra" in history.text and "Revert</button>" in history.text


def test_the_page_asks_before_it_retracts(served: tuple[Served, dict[str, str]]) -> None:
    server, _ = served
    with server.client(token="", follow_redirects=False) as browser:
        browser.get("/", params={"token": OPERATOR})
        fact = facts_of_page(server)[0]
        at = f"/users/default/facts/{fact['id']}/retract"
        shown = browser.get(at)
        assert shown.status_code == 200 and "Retract this fact?" in shown.text
        assert "<script" not in shown.text
        gone = browser.post(at, data=form_fields(shown.text, at))
        assert gone.status_code == 303
        page = browser.get("/users/default").text
        assert "Withdrawn by a person" in page and "retracted by a person" in page
    dreamed = subprocess.run([sys.executable, "-m", "dreamd", "--db", server.target, "--force"],
                             cwd=ROOT, env=env_for(), capture_output=True, text=True,
                             timeout=300)
    assert dreamed.returncode == 0, dreamed.stderr
    with server.client(token="", follow_redirects=True) as browser:
        index = browser.get("/", params={"token": OPERATOR}).text
        assert "What changed in the last pass" in index and "kept (#" in index


def facts_of_page(server: Served) -> list[dict[str, Any]]:
    with server.client() as client:
        return facts_of(client)

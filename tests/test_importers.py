"""Importers: real dates, branches, idempotence, and malformed files that import nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamd.cli.commands import main
from dreamd.memory.importers import ImportFormatError, parse_chatgpt, parse_jsonl, read_sessions

DATA = Path(__file__).parent / "data"


def invoke(db: Path, *args: str):
    return CliRunner().invoke(main, ["--db", str(db), "import", *args])


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def chatgpt_export() -> list[dict[str, object]]:
    """One conversation whose second user message was edited: two branches."""
    def node(nid: str, parent: str | None, role: str | None, text: str, t: float | None,
             children: list[str], ctype: str = "text") -> dict[str, object]:
        message = None if role is None else {
            "id": nid, "author": {"role": role}, "create_time": t,
            "content": {"content_type": ctype, "parts": [text]}, "metadata": {}}
        return {"id": nid, "message": message, "parent": parent, "children": children}

    mapping = {
        "root": node("root", None, None, "", None, ["sys"]),
        "sys": node("sys", "root", "system", "You are ChatGPT.", 1.0, ["u1"]),
        "u1": node("u1", "sys", "user", "Plan a trip to Kyoto", 1700000000.0, ["a1"]),
        "a1": node("a1", "u1", "assistant", "Sure: temples first.", None, ["u2old", "u2new"]),
        "u2old": node("u2old", "a1", "user", "For two days", 1700000100.0, ["a2old"]),
        "a2old": node("a2old", "u2old", "assistant", "Two-day plan...", 1700000110.0, []),
        "u2new": node("u2new", "a1", "user", "For five days", 1700000200.0, ["tool"]),
        "tool": node("tool", "u2new", "tool", "search results", 1700000205.0, ["a2new"]),
        "a2new": node("a2new", "tool", "assistant", "Five-day plan...", 1700000210.0, []),
    }
    return [{"id": "conv-1", "title": "Kyoto", "create_time": 1699999999.0,
             "mapping": mapping, "current_node": "a2new"}]


def test_chatgpt_follows_the_current_branch_and_skips_system_and_tool() -> None:
    [session] = parse_chatgpt(chatgpt_export(), "x.json")
    assert session.session_id == "chatgpt:conv-1" and session.name == "Kyoto"
    assert [(t.role, t.content) for t in session.turns] == [
        ("user", "Plan a trip to Kyoto"), ("assistant", "Sure: temples first."),
        ("user", "For five days"), ("assistant", "Five-day plan...")]
    # The assistant message without a time takes the previous message's.
    assert session.turns[1].created_at == session.turns[0].created_at
    assert session.turns[0].created_at.startswith("2023-11-14T22:13:20")


def test_chatgpt_broken_tree_names_the_place() -> None:
    export = chatgpt_export()
    export[0]["current_node"] = "missing"
    with pytest.raises(ImportFormatError,
                       match=r"x\.json: conversation 'Kyoto': broken message tree"):
        parse_chatgpt(export, "x.json")


def test_jsonl_import_is_idempotent_and_keeps_dates(tmp_path: Path) -> None:
    db, src = tmp_path / "m.db", tmp_path / "h.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"session": "a", "role": "user", "content": "hi", "created_at": "2024-01-02T03:04:05Z"},
        {"session": "a", "role": "assistant", "content": "hello",
         "created_at": "2024-01-02T03:04:09+00:00", "name": "greeting"},
        {"session": "b", "role": "user", "content": "later", "created_at": "2024-02-01T00:00:00"},
    ]))
    first = invoke(db, "jsonl", str(src))
    assert first.exit_code == 0 and "3 turns added" in first.output
    assert rows(db, "SELECT session_id, created_at FROM exchanges ORDER BY id") == [
        ("a", "2024-01-02T03:04:05+00:00"), ("a", "2024-01-02T03:04:09+00:00"),
        ("b", "2024-02-01T00:00:00+00:00")]
    again = invoke(db, "jsonl", str(src))
    assert "0 turns added, 3 already present" in again.output
    assert rows(db, "SELECT COUNT(*) FROM exchanges") == [(3,)]


@pytest.mark.parametrize(
    ("line", "message"),
    [('{"session": "a", "role": "user", "content": "x"}', "line 2: missing or empty string "
      "field 'created_at'"),
     ("not json at all", "line 2: not JSON"),
     ('{"session": "a", "role": "user", "content": "x", "created_at": "yesterday"}',
      "line 2: created_at is not ISO-8601")],
)
def test_malformed_jsonl_names_the_line_and_imports_nothing(tmp_path: Path, line: str,
                                                            message: str) -> None:
    db, src = tmp_path / "m.db", tmp_path / "h.jsonl"
    good = json.dumps({"session": "a", "role": "user", "content": "ok",
                       "created_at": "2024-01-01T00:00:00Z"})
    src.write_text(good + "\n" + line + "\n")
    result = invoke(db, "jsonl", str(src))
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {src}: {message}")
    assert len(result.output.strip().splitlines()) == 1
    assert not db.exists()  # parsed before the file was even opened


def test_jsonl_parser_groups_by_session() -> None:
    lines = [json.dumps({"session": s, "role": "user", "content": c,
                         "created_at": "2024-01-01T00:00:00Z"}) for s, c in
             [("a", "1"), ("b", "2"), ("a", "3")]]
    sessions = parse_jsonl(lines, "x")
    assert [(s.session_id, len(s.turns)) for s in sessions] == [("a", 2), ("b", 1)]


def test_locomo_file_imports_with_session_dates(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    result = invoke(db, "locomo", str(DATA / "locomo_sample.json"))
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT COUNT(DISTINCT session_id), COUNT(*) FROM exchanges") == [(3, 10)]
    first = rows(db, "SELECT role, created_at FROM exchanges ORDER BY id LIMIT 1")[0]
    assert first == ("Sam", "2023-05-06T19:05:00+00:00")
    assert rows(db, "SELECT content FROM exchanges WHERE content LIKE '%[shares an image:%'") == [
        ("A beagle mix from the shelter on Oak Street. "
         "[shares an image: a photo of a small brown dog on a sofa]",)]
    assert "0 turns added" in invoke(db, "locomo", str(DATA / "locomo_sample.json")).output


def test_longmemeval_file_imports_each_session_once(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    sessions = read_sessions("longmemeval", DATA / "longmemeval_sample.json")
    data = json.loads((DATA / "longmemeval_sample.json").read_text())
    unique = {sid for q in data for sid in q["haystack_session_ids"]}
    assert len(sessions) == len(unique)
    result = invoke(db, "longmemeval", str(DATA / "longmemeval_sample.json"))
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT COUNT(DISTINCT session_id) FROM exchanges") == [(len(unique),)]
    assert len(unique) == 3
    assert rows(db, "SELECT MIN(created_at) FROM exchanges") == [("2023-04-02T09:15:00+00:00",)]


def test_malformed_benchmark_file_names_the_session(tmp_path: Path) -> None:
    data = json.loads((DATA / "locomo_sample.json").read_text())[:1]
    data[0]["conversation"]["session_2_date_time"] = "sometime in May"
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(data))
    result = invoke(tmp_path / "m.db", "locomo", str(src))
    assert result.exit_code == 2
    assert f"{src}: conv-demo session_2: unreadable date 'sometime in May'" in result.output


def test_import_into_a_file_whose_app_embeds_every_turn_is_refused(tmp_path: Path) -> None:
    """The prior-art layout (exchanges.embedding NOT NULL, stacked by the app's recall):
    refused up front with why and what to do; the file is left as it was."""
    from tests.helpers import PRIOR_ART_DDL

    db = tmp_path / "m.db"
    conn = sqlite3.connect(db)
    conn.executescript(PRIOR_ART_DDL)
    conn.close()
    dreamd_ran = CliRunner().invoke(main, ["--db", str(db), "--force"],
                                    env={"DREAMD_EMBED__BACKEND": "hashing"})
    assert dreamd_ran.exit_code == 0, dreamd_ran.output
    before = db.read_bytes()
    result = invoke(db, "locomo", str(DATA / "locomo_sample.json"))
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {db}: exchanges.embedding is NOT NULL here (the chat app stores its own "
        "embedding with every turn), so dreamd cannot add turns to it; import into a new "
        "memory file, or let the chat app import the history so it embeds each turn")
    assert db.read_bytes() == before
    assert rows(db, "SELECT COUNT(*) FROM exchanges") == [(0,)]


def test_chatgpt_real_world_shapes(tmp_path: Path) -> None:
    """An image keeps a placeholder; an assistant message to a tool is not a turn; a
    conversation with no time at all is left out by title, not blocking the file."""
    export = chatgpt_export()
    mapping = export[0]["mapping"]
    mapping["u2new"]["message"]["content"] = {  # type: ignore[index]
        "content_type": "multimodal_text",
        "parts": [{"content_type": "image_asset_pointer", "asset_pointer": "file-x"},
                  "What do you think of this photo?"]}
    mapping["a2new"]["message"]["recipient"] = "bio"  # type: ignore[index]
    timeless = {"id": "conv-2", "title": "Undated", "current_node": "m", "mapping": {
        "m": {"message": {"author": {"role": "user"}, "content": {
            "content_type": "text", "parts": ["hello"]}}, "parent": None}}}
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps([*export, timeless]))
    db = tmp_path / "m.db"
    result = invoke(db, "chatgpt", str(src))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{src}: 1 session (1 new), 3 turns added, 0 already present",
        "left out 'Undated': no message and no conversation time"]
    assert rows(db, "SELECT role, content FROM exchanges ORDER BY id") == [
        ("user", "Plan a trip to Kyoto"), ("assistant", "Sure: temples first."),
        ("user", "[image]\nWhat do you think of this photo?")]


def test_chatgpt_reimport_after_the_branch_changed_does_not_mix_branches(
        tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    first = tmp_path / "first.json"
    first.write_text(json.dumps(chatgpt_export()))
    assert invoke(db, "chatgpt", str(first)).exit_code == 0
    edited = chatgpt_export()
    edited[0]["current_node"] = "a2old"  # the user went back to the other branch
    second = tmp_path / "second.json"
    second.write_text(json.dumps(edited))
    result = invoke(db, "chatgpt", str(second))
    assert result.exit_code == 0, result.output
    assert "left out 'Kyoto': changed since it was imported; forget session " \
           "chatgpt:conv-1 and import again to replace it" in result.output
    assert rows(db, "SELECT content FROM exchanges ORDER BY id") == [
        ("Plan a trip to Kyoto",), ("Sure: temples first.",), ("For five days",),
        ("Five-day plan...",)]


def test_claude_export_keeps_dates_words_and_the_branch_shown() -> None:
    first, second = read_sessions("claude", DATA / "claude_conversations.json")
    assert first.session_id == "claude:0f5c1a2e-6c1d-4e57-9d7b-0a1b2c3d4e5f"
    assert first.name == "Sourdough starter rescue"
    assert [(t.role, t.content, t.created_at) for t in first.turns] == [
        ("user", "My starter smells like nail polish remover. Is it dead?",
         "2025-03-08T09:12:44.118294+00:00"),
        ("assistant", "Not dead: that smell means it is hungry. Feed it twice a day for a "
         "few days.", "2025-03-08T09:12:58.004120+00:00"),  # its thinking is not a turn
        ("user", "Here is a photo of it after one feed.\n[attached: notes.txt]\n"
         "[attached: starter.jpg]", "2025-03-08T09:30:11+00:00"),
        ("assistant", "Those bubbles look healthy; bake tomorrow.",  # no tool traffic
         "2025-03-08T09:31:02.550013+00:00")]
    # A regenerated answer: the branch ending at the current leaf, not both answers.
    assert second.name is None
    assert [t.content for t in second.turns] == ["Which bus goes to the harbour?",
                                                 "Line 14 or the night bus N2."]


def test_openwebui_export_follows_the_branch_shown_and_reads_older_chats() -> None:
    tree, legacy = read_sessions("openwebui", DATA / "openwebui_export.json")
    assert tree.session_id == "openwebui:6b2d0c1e-aaaa-4bbb-8ccc-0d1e2f3a4b5c"
    assert tree.name == "Balcony tomatoes"
    assert [(t.role, t.content, t.created_at) for t in tree.turns] == [
        ("user", "The tomato leaves are curling upwards.", "2024-06-22T10:00:00+00:00"),
        ("assistant", "Probably heat stress; water in the morning.",
         "2024-06-22T10:00:10+00:00"),
        ("user", "Here is a picture of the worst one.\n[image]\n[attached: watering-log.csv]",
         "2024-06-22T10:03:20+00:00"),  # the edited question, not the first one
        ("assistant", "That is leaf roll, harmless to the fruit.",
         "2024-06-22T10:03:35+00:00")]
    assert legacy.session_id == "openwebui:legacy-7"
    assert [(t.role, t.content) for t in legacy.turns] == [
        ("user", "What is a good name for a grey cat?"),
        ("assistant", "Ash, Pebble or Smoke.")]  # the system prompt is no turn
    assert legacy.turns[0].created_at == "2023-11-14T22:13:20+00:00"


@pytest.mark.parametrize("fmt", ["claude", "openwebui"])
def test_assistant_exports_import_once(tmp_path: Path, fmt: str) -> None:
    db = tmp_path / "m.db"
    source = DATA / ("claude_conversations.json" if fmt == "claude" else "openwebui_export.json")
    first = invoke(db, fmt, str(source))
    assert first.exit_code == 0, first.output
    assert "2 sessions (2 new), 6 turns added" in first.output
    again = invoke(db, fmt, str(source))
    assert "0 turns added, 6 already present" in again.output
    assert rows(db, "SELECT COUNT(*) FROM exchanges") == [(6,)]


@pytest.mark.parametrize(("fmt", "broken", "message"), [
    ("claude", [{"name": "Trip", "chat_messages": [{"sender": "human", "text": "hi",
                                                     "created_at": "last week"}]}],
     "conversation 'Trip': message 1: unreadable time 'last week'"),
    ("claude", [{"name": "Trip"}], "conversation 'Trip': no 'chat_messages'"),
    ("openwebui", [{"id": "c", "title": "Plants", "chat": {"history": {
        "messages": {"a": {"id": "a", "parentId": "gone", "role": "user", "content": "x",
                           "timestamp": 1}}, "currentId": "a"}}}],
     "chat 'Plants': broken message tree at 'gone'"),
    ("openwebui", {"chats": []}, "expected a list of chats"),
])
def test_malformed_assistant_exports_name_the_place_and_import_nothing(
        tmp_path: Path, fmt: str, broken: object, message: str) -> None:
    db, src = tmp_path / "m.db", tmp_path / "export.json"
    src.write_text(json.dumps(broken))
    result = invoke(db, fmt, str(src))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: {src}: {message}"]
    assert not db.exists()

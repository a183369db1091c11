"""Every malformed input is one line, exit 2, nothing written — never a traceback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamd import config as cfg
from dreamd.cli.commands import main
from dreamd.errors import ConfigError
from dreamd.memory.importers import FORMATS, ImportFormatError, ImportSession, parse
from tests.helpers import dreamd_env


def chatgpt(message: Any = None, stamp: Any = 1700000000.0) -> list[dict[str, Any]]:
    message = message if message is not None else {
        "author": {"role": "user"}, "create_time": stamp,
        "content": {"content_type": "text", "parts": ["hello"]}}
    return [{"id": "c1", "title": "T", "current_node": "m",
             "mapping": {"root": {"message": None, "parent": None, "children": ["m"]},
                         "m": {"message": message, "parent": "root", "children": []}}}]


BAD_FILES = [
    ("chatgpt", json.dumps(chatgpt(message=7)), None),
    ("chatgpt", json.dumps(chatgpt(message="hi")), None),
    ("chatgpt", json.dumps(chatgpt(message=[1, 2])), None),
    ("chatgpt", json.dumps(chatgpt(stamp="yesterday")), "unreadable time 'yesterday'"),
    ("chatgpt", json.dumps(chatgpt(stamp=1e20)), "time out of range"),
    ("chatgpt", json.dumps([{"mapping": {"a": 5}, "current_node": "a"}]), None),
    ("chatgpt", json.dumps([{"mapping": {}, "current_node": ["x"]}]), "broken message tree"),
    ("jsonl", '{"session": "s", "role": "user", "content": "\\ud800", '
              '"created_at": "2024-01-01T00:00:00Z"}', "not valid Unicode"),
    ("jsonl", '{"session": "s", "role": "user", "content": "hi", '
              '"created_at": "9999-12-31T23:00:00-05:00"}', "created_at is out of range"),
    ("locomo", json.dumps([{"sample_id": "x", "conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "A", "text": 5}]}}]), None),
    ("longmemeval", json.dumps([{"haystack_session_ids": ["a"], "haystack_dates": [3],
                                 "haystack_sessions": [[]]}]), None),
]


@pytest.mark.parametrize(("fmt", "text", "says"), BAD_FILES)
def test_a_malformed_import_is_one_line_exit_2_and_writes_nothing(
        tmp_path: Path, fmt: str, text: str, says: str | None) -> None:
    src = tmp_path / "in.json"
    src.write_text(text, encoding="utf-8", errors="surrogatepass")
    db = tmp_path / "memory.db"
    result = CliRunner().invoke(main, ["--db", str(db), "import", fmt, str(src)],
                                env=dreamd_env())
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {src}"), result.output
    if says:
        assert says in lines[0]
    assert not db.exists()


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--loop", "nan"], {}, "--loop must be a finite number"),
    (["--loop", "inf"], {}, "not in the range"),
    (["--force"], {"DREAMD_SCHEDULE__MAX_INTERVAL_SECONDS": "inf"},
     "schedule.max_interval_seconds must be a finite number"),
    (["--force"], {"DREAMD_PASS__MAX_SECONDS": "nan"},
     "pass.max_seconds must be a finite number"),
    (["--force"], {"DREAMD_STORE__BUSY_TIMEOUT_MS": "99999999999999999999"},
     "store.busy_timeout_ms must be at most"),
])
def test_bad_numbers_are_refused(tmp_path: Path, args: list[str], env: dict[str, str],
                                 says: str) -> None:
    db = tmp_path / "memory.db"
    result = CliRunner().invoke(main, ["--db", str(db), *args], env=dreamd_env(**env))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.output
    assert not db.exists()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "text", "mapping", "current_node", "parts",
                       "1:56 pm on 8 May, 2023", "2023/05/17 (Wed) 23:40", "\ud800",
                       "2024-01-01T00:00:00+05:00", "9999-12-31T23:59:59-12:00"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from([
        "mapping", "current_node", "message", "parent", "author", "role", "content",
        "content_type", "parts", "create_time", "title", "id", "conversation", "sample_id",
        "session_1", "session_1_date_time", "speaker", "text", "blip_caption",
        "haystack_session_ids", "haystack_dates", "haystack_sessions", "question_id",
        "session", "created_at", "name", "m"]), children, max_size=6),
    max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMATS), data=JSON)
def test_any_json_shape_parses_or_is_one_import_error(fmt: str, data: Any) -> None:
    if fmt == "jsonl":
        data = [json.dumps(item) for item in (data if isinstance(data, list) else [data])]
    try:
        sessions = parse(fmt, data, "f.json")
    except ImportFormatError as exc:
        assert "\n" not in str(exc)
        return
    for session in sessions:
        assert isinstance(session, ImportSession)
        for turn in session.turns:
            turn.content.encode("utf-8")
            assert isinstance(turn.role, str) and isinstance(turn.created_at, str)


def config_keys() -> list[tuple[str, str]]:
    keys = [("", "db")]
    for section in dataclasses.fields(cfg.Config):
        if "kind" in section.metadata:
            continue
        for key in dataclasses.fields(getattr(cfg.Config(), section.name)):
            keys.append((section.name.rstrip("_"), key.name))
    return keys


VALUES = (st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
          | st.floats() | st.text(max_size=20) | st.lists(st.integers(), max_size=2)
          | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(config_keys()), value=VALUES)
def test_any_value_for_any_config_key_is_taken_or_one_config_error(
        key: tuple[str, str], value: Any) -> None:
    section, name = key
    data = {name: value} if not section else {section: {name: value}}
    try:
        config = cfg.check(cfg._apply(cfg.Config(), data, ""))
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(config, cfg.Config)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(config_keys()), value=st.text(max_size=20))
def test_any_environment_text_for_any_config_key_is_taken_or_one_config_error(
        key: tuple[str, str], value: str) -> None:
    section, name = key
    var = "DREAMD_DB" if not section else f"DREAMD_{section.upper()}__{name.upper()}"
    try:
        cfg.check(cfg.env_overrides({var: value}, cfg.Config()))
    except ConfigError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(("fmt", "data"), [
    ("locomo", [{"sample_id": "conv\n1", "conversation": None}]),
    ("longmemeval", [{"question_id": "q\r\n2", "haystack_session_ids": ["s"]}]),
])
def test_an_id_with_a_line_break_stays_on_the_error_line(fmt: str, data: Any) -> None:
    """Found by the property test above: the file's own ids go into the message."""
    with pytest.raises(ImportFormatError) as error:
        parse(fmt, data, "f.json")
    assert "\n" not in str(error.value) and "\r" not in str(error.value)
    assert str(error.value).startswith("f.json: ")

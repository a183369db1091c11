"""Config: defaults < TOML < DREAMD_* env < flags; unknown or invalid keys are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamd.config import Config, load, parse
from dreamd.errors import ConfigError


def test_defaults_are_the_documentation() -> None:
    config = parse("")
    assert config == Config()
    assert config.summarize.after == 20 and config.embed.backend == "local"


def test_toml_overrides_defaults() -> None:
    text = 'db = "/x.db"\n[summarize]\nafter = 5\nidle_minutes = 1.5\n[pass]\nmax_items = 3'
    config = parse(text)
    assert (config.db, config.summarize.after, config.summarize.idle_minutes) == ("/x.db", 5, 1.5)
    assert config.pass_.max_items == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[summarize]\nafter = -3", "summarize.after must be at least 1, got -3"),
        ("[summarize]\nafter = 2.5", "summarize.after must be a whole number"),
        ("[summarize]\nafter = true", "summarize.after must be a number"),
        ("[summarise]\nafter = 3", "summarise is not a known configuration key"),
        ("[summarize]\nafte = 3", "summarize.afte is not a known configuration key"),
        ("[embed]\nbackend = 'gpt'", "embed.backend must be one of local, openai, hashing"),
        ("[drives]\ncoherence_threshold = 1.5", "drives.coherence_threshold must be at most 1"),
        ("summarize = 3", "summarize must be a table"),
        ("[summarize\n", "config is not valid TOML"),
    ],
)
def test_invalid_keys_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse(text)


def test_env_overrides_file_and_flag_overrides_env(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('db = "/file.db"\n[summarize]\nafter = 7\n')
    env = {"DREAMD_SUMMARIZE__AFTER": "9", "DREAMD_DB": "/env.db"}
    config = load(path, environ=env)
    assert (config.summarize.after, config.db) == (9, "/env.db")
    assert load(path, environ=env, db="/flag.db").db == "/flag.db"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DREAMD_SUMMARIZE__AFTER": "x"}, "DREAMD_summarize.after must be a number"),
        ({"DREAMD_NOPE": "1"}, "DREAMD_NOPE is not a known configuration key"),
        ({"DREAMD_SCHEDULE__SPEED": "1"}, "schedule.speed is not a known configuration key"),
        ({"DREAMD_SCHEDULE__QUIET_HOURS": "25:00-7"}, "quiet hours must look like"),
        ({"DREAMD_SCHEDULE__DEEP_PASS_CRON": "every night"}, "is not a crontab expression"),
        ({"DREAMD_SCHEDULE__MIN_INTERVAL_SECONDS": "9000"}, "is more than"),
    ],
)
def test_invalid_env_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load(None, environ=env)


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "absent.toml", environ={})


def test_example_config_lists_every_key_with_its_default() -> None:
    """config.example.toml agrees with the definitions (the configuration reference is
    written from them): every key the dataclasses define is set in its own section to its
    default, and the file sets no other key."""
    import dataclasses
    import tomllib

    text = (Path(__file__).parent.parent / "config.example.toml").read_text()
    assert parse(text) == Config()
    written = tomllib.loads(text)
    defined: dict[str, object] = {}
    for f in dataclasses.fields(Config):
        section = getattr(Config(), f.name)
        if not dataclasses.is_dataclass(section):
            defined[f.name] = section
            continue
        defined[f.name.rstrip("_")] = {sub.name: getattr(section, sub.name)
                                       for sub in dataclasses.fields(section)}
    assert written.keys() == defined.keys()
    for name, value in defined.items():
        assert written[name] == value, f"{name}: the example says {written[name]!r}"


def test_a_renamed_key_still_works_under_its_old_name() -> None:
    """The deadline bounds one request with its retries, so it is `call_deadline_seconds`;
    configs that say `item_deadline_seconds` keep working."""
    old = parse("[completer]\nitem_deadline_seconds = 42\n")
    assert old.completer.call_deadline_seconds == 42
    env = load(environ={"DREAMD_COMPLETER__ITEM_DEADLINE_SECONDS": "7"})
    assert env.completer.call_deadline_seconds == 7
    with pytest.raises(ConfigError, match=r"old name of completer\.call_deadline_seconds"):
        parse("[completer]\nitem_deadline_seconds = 1\ncall_deadline_seconds = 2\n")

"""Configuration: frozen dataclasses whose defaults are the documentation.

Precedence: built-in defaults < TOML file < DREAMD_* environment < command-line flags.
Every key is checked; an unknown or invalid one raises ConfigError naming it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamd.errors import ConfigError
from dreamd.url import is_url, shown

DEFAULT_DB = "~/.local/share/dreamd/memory.db"


def _check(kind: str, **limits: Any) -> dict[str, Any]:
    return {"kind": kind, **limits}


@dataclass(frozen=True)
class StoreConfig:
    busy_timeout_ms: int = field(default=5000, metadata=_check("int", min=100))
    url: str = field(default="", metadata=_check("optstr"))
    schema: str = field(default="public", metadata=_check("str"))


@dataclass(frozen=True)
class WorkersConfig:
    lease_seconds: float = field(default=60.0, metadata=_check("float", min=2, max=3600))
    batch_users: int = field(default=8, metadata=_check("int", min=1, max=10000))


@dataclass(frozen=True)
class UserConfig:
    id: str = field(default="default", metadata=_check("str"))
    name: str = field(default="the user", metadata=_check("str"))


@dataclass(frozen=True)
class AgentConfig:
    id: str = field(default="assistant", metadata=_check("str"))
    name: str = field(default="the assistant", metadata=_check("str"))


@dataclass(frozen=True)
class DrivesConfig:
    continuity_threshold: float = field(default=0.3, metadata=_check("float", min=0, max=1))
    coherence_threshold: float = field(default=0.3, metadata=_check("float", min=0, max=1))
    curiosity_threshold: float = field(default=0.5, metadata=_check("float", min=0, max=1))


@dataclass(frozen=True)
class EmbedConfig:
    backend: str = field(
        default="local", metadata=_check("choice", choices=("local", "openai", "hashing"))
    )
    batch_size: int = field(default=64, metadata=_check("int", min=1, max=4096))
    threads: int = field(default=0, metadata=_check("int", min=0, max=256))
    model: str = field(default="text-embedding-3-small", metadata=_check("str"))
    base_url: str = field(default="", metadata=_check("optstr"))
    model_cache: str = field(default="", metadata=_check("optstr"))


@dataclass(frozen=True)
class CompleterConfig:
    backend: str = field(
        default="extractive", metadata=_check("choice", choices=("extractive", "openai"))
    )
    # "" = the SDK's own $OPENAI_BASE_URL, else OpenAI's API (see server_url).
    base_url: str = field(default="", metadata=_check("optstr"))
    model: str = field(default="gpt-4o-mini", metadata=_check("str"))
    summarize_model: str = field(default="", metadata=_check("optstr"))
    profile_model: str = field(default="", metadata=_check("optstr"))
    eras_model: str = field(default="", metadata=_check("optstr"))
    narrative_model: str = field(default="", metadata=_check("optstr"))
    reflect_model: str = field(default="", metadata=_check("optstr"))
    facts_model: str = field(default="", metadata=_check("optstr"))
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=_check("str"))
    credential: str = field(default="openai-api-key", metadata=_check("str"))
    connect_timeout_seconds: float = field(default=5.0, metadata=_check("float", min=0.1))
    read_timeout_seconds: float = field(default=120.0, metadata=_check("float", min=0.1))
    call_deadline_seconds: float = field(default=300.0, metadata=_check("float", min=0.1))
    retries: int = field(default=3, metadata=_check("int", min=0, max=20))
    retry_after_cap_seconds: float = field(default=60.0, metadata=_check("float", min=0))
    breaker_failures: int = field(default=5, metadata=_check("int", min=1))
    breaker_cooldown_seconds: float = field(default=300.0, metadata=_check("float", min=0))
    workers: int = field(default=4, metadata=_check("int", min=1, max=64))
    temperature: float = field(default=0.2, metadata=_check("float", min=0, max=2))
    max_output_tokens: int = field(default=600, metadata=_check("int", min=16))
    context_window: int = field(default=8192, metadata=_check("int", min=256))


OPENAI_API = "https://api.openai.com/v1"


def server_url(base_url: str, environ: dict[str, str] | None = None) -> str:
    """The completer's server: `base_url`, else the SDK's $OPENAI_BASE_URL, else OpenAI."""
    env = os.environ if environ is None else environ
    return base_url or env.get("OPENAI_BASE_URL") or OPENAI_API


@dataclass(frozen=True)
class BudgetConfig:
    tokens_per_pass: int = field(default=0, metadata=_check("int", min=0))
    tokens_per_day: int = field(default=0, metadata=_check("int", min=0))


@dataclass(frozen=True)
class SummarizeConfig:
    after: int = field(default=20, metadata=_check("int", min=1))
    idle_minutes: float = field(default=30.0, metadata=_check("float", min=0))
    chunk_turns: int = field(default=120, metadata=_check("int", min=4))
    gist_lines: int = field(default=8, metadata=_check("int", min=1, max=100))


@dataclass(frozen=True)
class FactsConfig:
    producer: str = field(
        default="auto", metadata=_check("choice", choices=("auto", "offline", "llm")))


@dataclass(frozen=True)
class ProfileConfig:
    max_facts: int = field(default=16, metadata=_check("int", min=1, max=500))


@dataclass(frozen=True)
class ErasConfig:
    lines: int = field(default=6, metadata=_check("int", min=1, max=100))


@dataclass(frozen=True)
class NarrativeConfig:
    months: int = field(default=3, metadata=_check("int", min=1, max=120))
    lines: int = field(default=8, metadata=_check("int", min=1, max=100))


@dataclass(frozen=True)
class ReflectConfig:
    max_reflections: int = field(default=20, metadata=_check("int", min=1, max=1000))
    turns_scale: int = field(default=50, metadata=_check("int", min=1))
    hours_scale: float = field(default=24.0, metadata=_check("float", min=0.01))


@dataclass(frozen=True)
class JobsConfig:
    max_attempts: int = field(default=5, metadata=_check("int", min=1, max=100))
    backoff_seconds: float = field(default=60.0, metadata=_check("float", min=0))
    backoff_max_seconds: float = field(default=21600.0, metadata=_check("float", min=0))
    fallback: bool = field(default=True, metadata=_check("bool"))
    fallback_retry_hours: float = field(default=24.0, metadata=_check("float", min=0))


@dataclass(frozen=True)
class PassConfig:
    max_seconds: float = field(default=900.0, metadata=_check("float", min=0))
    max_items: int = field(default=0, metadata=_check("int", min=0))
    stop_grace_seconds: float = field(default=8.0, metadata=_check("float", min=0.5, max=600))
    background: bool = field(default=True, metadata=_check("bool"))
    # The daemon and --loop run each pass in a process of their own (read at start).
    own_process: bool = field(default=True, metadata=_check("bool"))


@dataclass(frozen=True)
class ScheduleConfig:
    min_interval_seconds: float = field(default=60.0, metadata=_check("float", min=0.05))
    max_interval_seconds: float = field(default=1800.0, metadata=_check("float", min=0.05))
    wake_on_turns_seconds: float = field(default=10.0, metadata=_check("float", min=0))
    quiet_hours: str = field(default="", metadata=_check("quiet_hours"))
    deep_pass_cron: str = field(default="", metadata=_check("cron"))
    # After a pass the store cut short (its server away): the next try, doubling while
    # the store stays away, up to the most (never later than the schedule's own delay).
    store_retry_seconds: float = field(default=1.0, metadata=_check("float", min=0.05))
    store_retry_max_seconds: float = field(default=30.0, metadata=_check("float", min=0.05))


@dataclass(frozen=True)
class ServeConfig:
    """`dreamd serve`: the HTTP API, the MCP endpoint and the page."""

    host: str = field(default="127.0.0.1", metadata=_check("str"))
    port: int = field(default=8765, metadata=_check("int", min=0, max=65535))  # 0: any free
    # The bearer token: $DREAMD_API_TOKEN, else this file, else the systemd credential.
    token_file: str = field(default="", metadata=_check("optstr"))
    credential: str = field(default="dreamd-api-token", metadata=_check("str"))
    # Origins a browser page may call the API from, comma-separated ("" = CORS off).
    cors_origins: str = field(default="", metadata=_check("optstr"))
    max_body_kb: int = field(default=1024, metadata=_check("int", min=1, max=1024 * 1024))
    max_batch: int = field(default=500, metadata=_check("int", min=1, max=100000))
    max_k: int = field(default=100, metadata=_check("int", min=1, max=1000))
    max_budget: int = field(default=32000, metadata=_check("int", min=100, max=1_000_000))
    connections: int = field(default=4, metadata=_check("int", min=1, max=64))
    mcp_forget: bool = field(default=False, metadata=_check("bool"))
    mcp_corrections: bool = field(default=False, metadata=_check("bool"))


@dataclass(frozen=True)
class LogConfig:
    level: str = field(
        default="info", metadata=_check("choice", choices=("debug", "info", "warning", "error"))
    )
    format: str = field(
        default="auto", metadata=_check("choice", choices=("auto", "json", "console"))
    )


@dataclass(frozen=True)
class Config:
    db: str = field(default=DEFAULT_DB, metadata=_check("str"))
    store: StoreConfig = StoreConfig()
    workers: WorkersConfig = WorkersConfig()
    user: UserConfig = UserConfig()
    agent: AgentConfig = AgentConfig()
    drives: DrivesConfig = DrivesConfig()
    embed: EmbedConfig = EmbedConfig()
    completer: CompleterConfig = CompleterConfig()
    budget: BudgetConfig = BudgetConfig()
    summarize: SummarizeConfig = SummarizeConfig()
    facts: FactsConfig = FactsConfig()
    profile: ProfileConfig = ProfileConfig()
    eras: ErasConfig = ErasConfig()
    narrative: NarrativeConfig = NarrativeConfig()
    reflect: ReflectConfig = ReflectConfig()
    jobs: JobsConfig = JobsConfig()
    pass_: PassConfig = PassConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    serve: ServeConfig = ServeConfig()
    log: LogConfig = LogConfig()

    @property
    def db_path(self) -> Path:
        return Path(self.db).expanduser()

    @property
    def store_url(self) -> str | None:
        """The PostgreSQL URL memory lives at, or None for the SQLite file at `db`. A store
        named by --db or DREAMD_DB wins over `[store] url`."""
        if is_url(self.db):
            return self.db
        if self.store.url and self.db == DEFAULT_DB:
            return self.store.url
        return None

    @property
    def where(self) -> str:
        """The store as a person may see it: the file's path, or the URL without a
        password."""
        if self.store_url is None:
            return str(self.db_path)
        return shown(self.store_url)


def _section_name(f: dataclasses.Field[Any]) -> str:
    return f.name.rstrip("_")


def _sections() -> dict[str, dataclasses.Field[Any]]:
    return {_section_name(f): f for f in dataclasses.fields(Config) if "kind" not in f.metadata}


def parse_quiet_hours(spec: str) -> tuple[int, int] | None:
    """'23:00-07:30' -> (start, end) in minutes after midnight; '' -> None."""
    if not spec:
        return None
    try:
        start, end = (part.strip() for part in spec.split("-"))
        minutes = []
        for part in (start, end):
            hours, mins = part.split(":")
            value = int(hours) * 60 + int(mins)
            if not (0 <= int(hours) < 24 and 0 <= int(mins) < 60):
                raise ValueError
            minutes.append(value)
    except ValueError:
        raise ConfigError(f"quiet hours must look like 23:00-07:00, got {spec!r}") from None
    return minutes[0], minutes[1]


def _special(where: str, value: Any, kind: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")
    if kind == "quiet_hours":
        try:
            parse_quiet_hours(value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    elif value:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value)
        except ValueError as exc:
            raise ConfigError(f"{where} is not a crontab expression ({exc}): {value!r}") from None
    return value


# Bounds for keys that name none of their own: large enough for any real setting, small
# enough that no timer, SQLite pragma or sleep overflows.
MAX_INT = 2**31 - 1
MAX_FLOAT = 1e9


def _text(where: str, value: str) -> str:
    """Strings reach file paths, SQLite and HTTP headers: no NUL, valid Unicode."""
    if "\x00" in value:
        raise ConfigError(f"{where} must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{where} is not valid UTF-8 text") from None
    return value


def _coerce(where: str, value: Any, meta: dict[str, Any], from_text: bool) -> Any:
    if isinstance(value, str):
        _text(where, value)
    kind = meta["kind"]
    if kind in ("quiet_hours", "cron"):
        return _special(where, value, kind)
    if kind == "bool":
        return _bool(where, value, from_text)
    if kind in ("optstr", "str", "choice"):
        return _string(where, value, meta)
    return _number(where, value, meta, from_text)


def _bool(where: str, value: Any, from_text: bool) -> bool:
    if from_text and isinstance(value, str) and value.lower() in _BOOLS:
        return _BOOLS[value.lower()]
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    return value


def _string(where: str, value: Any, meta: dict[str, Any]) -> str:
    """An optional string (may be empty), a string, or one of a few choices."""
    kind = meta["kind"]
    if not isinstance(value, str):
        said = "a string" if kind == "optstr" else "a non-empty string"
        raise ConfigError(f"{where} must be {said}, got {value!r}")
    if kind != "optstr" and not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    if kind == "choice" and value not in meta["choices"]:
        raise ConfigError(f"{where} must be one of {', '.join(meta['choices'])}, got {value!r}")
    return value


def _number(where: str, value: Any, meta: dict[str, Any], from_text: bool) -> int | float:
    """A whole or finite number within the key's bounds (parsed, from an environment)."""
    kind = meta["kind"]
    if from_text:
        try:
            value = int(value) if kind == "int" else float(value)
        except ValueError:
            raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if kind == "int" and not isinstance(value, int):
        raise ConfigError(f"{where} must be a whole number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    limit = meta.get("max", MAX_INT if kind == "int" else MAX_FLOAT)
    if value > limit:
        shown = limit if isinstance(limit, int) else f"{limit:g}"
        raise ConfigError(f"{where} must be at most {shown}, got {value!r}")
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{where} must be at least {meta['min']}, got {value!r}")
    return float(value) if kind == "float" else value


_BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}

# Keys renamed since a release: the old name still works, meaning the new one.
RENAMED = {("completer", "item_deadline_seconds"): "call_deadline_seconds"}


def _apply(base: Config, data: dict[str, Any], origin: str, from_text: bool = False) -> Config:
    """Return `base` with the keys of `data` (nested like the TOML file) applied."""
    top: dict[str, Any] = {}
    sections = _sections()
    for key, value in data.items():
        if key == "db":
            top["db"] = _coerce(f"{origin}db", value, {"kind": "str"}, from_text)
            continue
        if key not in sections:
            raise ConfigError(f"{origin}{key} is not a known configuration key")
        if not isinstance(value, dict):
            raise ConfigError(f"{origin}{key} must be a table of settings")
        f = sections[key]
        current = getattr(base, f.name)
        fields = {sf.name: sf for sf in dataclasses.fields(current)}
        changes = {}
        for old, subvalue in value.items():
            sub = RENAMED.get((key, old), old)
            if sub != old and sub in value:
                raise ConfigError(f"{origin}{key}.{old} is the old name of {key}.{sub}: "
                                  "set only one")
            if sub not in fields:
                raise ConfigError(f"{origin}{key}.{sub} is not a known configuration key")
            changes[sub] = _coerce(
                f"{origin}{key}.{sub}", subvalue, dict(fields[sub].metadata), from_text
            )
        top[f.name] = dataclasses.replace(current, **changes)
    return dataclasses.replace(base, **top)


def parse(text: str, base: Config | None = None) -> Config:
    """Parse TOML text over `base` (the built-in defaults when None)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config is not valid TOML: {exc}") from None
    return _apply(base or Config(), data, "")


def env_overrides(environ: dict[str, str], base: Config) -> Config:
    """Apply DREAMD_DB and DREAMD_<SECTION>__<KEY> variables (values as text)."""
    data: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith("DREAMD_") or name in _NOT_CONFIG:
            continue
        key = name[len("DREAMD_") :].lower()
        if key == "db":
            data["db"] = value
            continue
        section, sep, sub = key.partition("__")
        if not sep or not sub:
            raise ConfigError(
                f"environment variable {name} is not a known configuration key "
                "(use DREAMD_DB or DREAMD_<SECTION>__<KEY>)"
            )
        data.setdefault(section, {})[sub] = value
    try:
        return _apply(base, data, "environment DREAMD_", from_text=True)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("environment DREAMD_", "DREAMD_", 1)) from None


# Variables with the DREAMD_ prefix that are not configuration keys.
_NOT_CONFIG = frozenset({"DREAMD_CONFIG", "DREAMD_API_TOKEN"})


def load(
    path: str | Path | None = None,
    environ: dict[str, str] | None = None,
    db: str | None = None,
) -> Config:
    """Defaults, then the TOML file at `path` (or $DREAMD_CONFIG), then env, then `db`."""
    environ = dict(os.environ) if environ is None else environ
    path = path or environ.get("DREAMD_CONFIG")
    config = Config()
    if path:
        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
        try:
            config = parse(text)
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc}") from None
    config = env_overrides(environ, config)
    if db is not None:
        config = dataclasses.replace(config, db=db)
    return check(config)


def check(config: Config) -> Config:
    """Rules that span keys."""
    if config.store.url and not is_url(config.store.url):
        raise ConfigError(f"store.url must be a PostgreSQL URL (postgresql://…), "
                          f"not {config.store.url.split('://')[0]!r}")
    s = config.schedule
    if s.min_interval_seconds > s.max_interval_seconds:
        raise ConfigError(
            f"schedule.min_interval_seconds ({s.min_interval_seconds:g}) is more than "
            f"schedule.max_interval_seconds ({s.max_interval_seconds:g})"
        )
    return config

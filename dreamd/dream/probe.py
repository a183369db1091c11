"""`dreamd check-llm`: whether the configured server and model will give usable memory.

It asks what a pass would ask, on a conversation it is given (the command gives one
shipped with dreamd): is the server there, does it serve the model, how many tokens does
the model hold (llama.cpp's /props, Ollama's /api/show, else the config), does it
constrain JSON to a schema, and do one summary and one fact extraction pass the checks
every answer meets before it is stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.validate import junk, source_of
from dreamd.config import Config, server_url
from dreamd.dream.jobs.facts_asked import PER_TURN, parsed
from dreamd.dream.prompts import facts_prompt, summary_prompt, turn_line
from dreamd.errors import BackendError, BackendUnavailable, DreamdError, OutputInvalid
from dreamd.text.dates import day_of, long_date

EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE: the server cannot be reached at all


class Unreachable(DreamdError):
    """The model server does not answer."""

    exit_code = EXIT_UNREACHABLE


@dataclass(frozen=True)
class Finding:
    """One check: `ok` None for a plain fact, `fix` what to change when it failed."""

    check: str
    ok: bool | None
    said: str
    fix: str = ""
    seconds: float = 0.0


def context_of(base_url: str, model: str, timeout: float) -> tuple[int, str] | None:
    """(tokens, where it was read) from the server itself, when it says."""
    root = base_url.rstrip("/").removesuffix("/v1")
    with httpx.Client(timeout=timeout) as http:
        try:  # llama.cpp's server
            props = http.get(f"{root}/props")
            if props.status_code == 200:
                n_ctx = (props.json().get("default_generation_settings") or {}).get("n_ctx")
                if isinstance(n_ctx, int) and n_ctx > 0:
                    return n_ctx, "llama.cpp /props"
        except (httpx.HTTPError, ValueError):
            pass
        try:  # Ollama: the window it runs the model with, else the model's own
            shown = http.post(f"{root}/api/show", json={"model": model})
            if shown.status_code == 200:
                data = shown.json()
                for line in str(data.get("parameters") or "").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "num_ctx" and value.strip().isdigit():
                        return int(value), "Ollama /api/show num_ctx"
                info = data.get("model_info") or {}
                lengths = [v for k, v in info.items() if k.endswith(".context_length")]
                if lengths and isinstance(lengths[0], int):
                    return lengths[0], "Ollama /api/show (Ollama may run it with less)"
        except (httpx.HTTPError, ValueError):
            pass
    return None


def timed(run: Callable[[], Finding]) -> Finding:
    started = time.monotonic()
    finding = run()
    return Finding(finding.check, finding.ok, finding.said, finding.fix,
                   round(time.monotonic() - started, 1))


def probe(config: Config, turns: list[tuple[str, str, str]],
          environ: dict[str, str] | None = None) -> list[Finding]:
    """Every check in order, on a conversation's `turns` (role, text, ISO time);
    Unreachable when the server does not answer at all."""
    c = config.completer
    url = server_url(c.base_url, environ)
    names = {"user": config.user.name, "agent": config.agent.name}
    found: list[Finding] = []
    with OpenAICompleter(c, environ=environ) as completer:
        try:
            served = completer.models()
        except BackendUnavailable as exc:
            raise Unreachable(f"cannot check the model: {exc}") from None
        found.append(Finding("server", True, f"{url} answers; it serves "
                             f"{', '.join(served[:5]) or 'no model it names'}"))
        if served and c.model not in served:  # a one-model server answers any name
            found.append(Finding("model", None, f"{c.model!r} is not among them: a server "
                                 "with one model (llama.cpp) answers to any name, others "
                                 "(Ollama, vLLM) refuse it (see the summary below)"))
        window = context_of(url, c.model, c.read_timeout_seconds)
        if window is None:
            found.append(Finding("context", None, f"the server does not say its window; "
                                 f"dreamd assumes completer.context_window = "
                                 f"{c.context_window}"))
        elif window[0] < c.context_window:
            found.append(Finding(
                "context", False, f"the model holds {window[0]} tokens ({window[1]}), "
                f"dreamd assumes {c.context_window}",
                f"set completer.context_window = {window[0]}"))
        else:
            found.append(Finding("context", True, f"the model holds {window[0]} tokens "
                                 f"({window[1]}); dreamd uses {c.context_window}"))
        numbered = [(i + 1, role, text, at) for i, (role, text, at) in enumerate(turns)]
        found.append(timed(lambda: summary_check(completer, names, numbered, config)))
        found.append(timed(lambda: facts_check(completer, names, numbered)))
        refused = completer.schema_refused.get(c.model)
        shape = completer.schema_shape(c.model)
        found.insert(-2, Finding(
            "schema", refused is None,
            f"JSON answers are constrained to their schema (response_format {shape})"
            if refused is None else f"no JSON schema: the server {refused}; facts and "
            "reflections rely on the prompt and one repair", "" if refused is None else
            "a server that makes a grammar of a schema (llama.cpp, vLLM, Ollama) gives a "
            "small model's JSON its shape"))
    return found


def summary_check(completer: OpenAICompleter, names: dict[str, str],
                  turns: list[tuple[int, str, str, str]], config: Config) -> Finding:
    prompt = summary_prompt(names, None, [turn_line(role, text) for _, role, text, _ in turns],
                            config.summarize.gist_lines, said_at=[at for *_, at in turns])
    try:
        text = completer.complete(prompt).text
    except BackendError as exc:  # the server's own words say what to change
        return Finding("summary", False, f"no summary: {exc}")
    except OutputInvalid as exc:
        return Finding("summary", False, f"no summary: {exc}", _BIGGER)
    problem = junk(text, prompt)
    if problem:
        return Finding("summary", False, f"rejected: {problem}", _BIGGER)
    first = text.strip().splitlines()[0]
    return Finding("summary", True, f"accepted: {first[:100]}")


def facts_check(completer: OpenAICompleter, names: dict[str, str],
                turns: list[tuple[int, str, str, str]]) -> Finding:
    lines = []
    for turn_id, role, text, at in turns:
        if role == "user":
            day = day_of(at)
            lines.append(f"[{turn_id}] {long_date(day) + '. ' if day else ''}"
                         f"{names['user']}: {text}")
    prompt = facts_prompt(names, lines, [], PER_TURN)
    ids = {int(ln[1 : ln.index("]")]) for ln in lines}
    try:
        raw = completer.complete(prompt).text
        facts = parsed(raw, ids, set(), source_of(prompt))
    except BackendError as exc:  # the server's own words say what to change
        return Finding("facts", False, f"no facts: {exc}")
    except OutputInvalid as exc:
        return Finding("facts", False, f"no facts: {exc}", _BIGGER)
    if not facts:
        return Finding("facts", False, "the answer held no fact", _BIGGER)
    return Finding("facts", True, f"accepted {len(facts)}: {facts[0][0].statement[:100]}")


_BIGGER = ("a larger instruct model (1B or more) gives usable memory; meanwhile the "
           "extractive fallback builds what this one cannot (jobs.fallback)")


def verdict(found: list[Finding], fallback: bool = True) -> tuple[bool, str]:
    """Whether this model will give usable memory, in one line (`fallback`: whether
    jobs.fallback is on)."""
    failed = [f for f in found if f.ok is False]
    if not failed:
        return True, "this model will give usable memory"
    names = ", ".join(f.check for f in failed)
    memory = {"summary", "facts"} & {f.check for f in failed}
    if memory:
        keeps = ("the fallback keeps memory from its extractive producer" if fallback
                 else "with jobs.fallback off, its items will fail")
        return False, f"this model will not give usable memory as configured ({names}); {keeps}"
    return False, f"usable, once the configuration is mended ({names})"


def as_dict(found: list[Finding]) -> list[dict[str, Any]]:
    return [f.__dict__ for f in found]

"""The openai backend: OpenAI and any OpenAI-compatible server (Ollama, vLLM, llama.cpp).

The only module that imports the vendor SDK. The SDK's own retries are off (its
defaults are a 600 s timeout and 2 retries): dreamd sets explicit timeouts, a per-item
deadline, its own backoff that honours Retry-After, and a circuit breaker.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import numpy as np
import openai

from dreamd.backends import write_gate
from dreamd.backends.credentials import secret
from dreamd.backends.llm_output import clean, estimate_tokens
from dreamd.config import CompleterConfig, Config, server_url
from dreamd.errors import (
    BackendError,
    BackendMisconfigured,
    BackendUnavailable,
    BreakerOpen,
    InputRejected,
    Stopping,
)
from dreamd.models import Completion, Prompt


def api_key(config: CompleterConfig, environ: dict[str, str] | None = None) -> str | None:
    """From the environment variable named in config, else the systemd credential file."""
    return secret(config.api_key_env, config.credential, environ=environ)


class Breaker:
    """Opens after `limit` transient failures in a row; after `cooldown` one call may try."""

    def __init__(self, limit: int, cooldown: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.cooldown, self.clock = limit, cooldown, clock
        self.failures = 0
        self.opened_at: float | None = None
        self.first_cause = ""
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        with self._lock:
            if self.opened_at is None:
                return "closed"
            return "open" if self.clock() - self.opened_at < self.cooldown else "half-open"

    def check(self) -> None:
        if self.state == "open":
            raise BreakerOpen(
                f"circuit breaker open after {self.failures} transient failures in a row "
                f"(first: {self.first_cause}); no calls for {self.cooldown:g} s"
            )

    def success(self) -> None:
        with self._lock:
            self.failures, self.opened_at, self.first_cause = 0, None, ""

    def failure(self, cause: str = "") -> None:
        with self._lock:
            self.failures += 1
            self.first_cause = self.first_cause or cause
            if self.failures >= self.limit:
                self.opened_at = self.clock()


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    if headers.get("retry-after-ms"):
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


# Words with which servers say an endpoint cannot work at all, whatever the retry.
_CANNOT_WORK = re.compile(
    r"must be created with|not supported|does not support|unsupported|not enabled|"
    r"no such model|model not found|embedding=true", re.IGNORECASE)


def reason(exc: BaseException, where: str, secret: str | None = None) -> str:
    """What went wrong, in the server's or the network's own words, never quoting the key:
    "connection refused at http://…", "503 from http://…: model is loading"."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        said = str(message or getattr(exc, "message", "") or "").strip()
        text = f"{status} from {where}" + (f": {said}" if said else "")
    else:
        root: BaseException = exc
        while root.__cause__ is not None or root.__context__ is not None:
            root = root.__cause__ or root.__context__  # type: ignore[assignment]
        detail = str(root) or type(root).__name__
        kind = "no answer in time" if isinstance(exc, openai.APITimeoutError) else "cannot reach"
        text = f"{kind} {where} ({type(root).__name__}: {detail})"
    if secret:
        text = text.replace(secret, "[key]")
    return " ".join(text.split())[:300]


def classify(exc: BaseException, where: str = "the server", secret: str | None = None
             ) -> BackendError:
    """Map an SDK error to one of dreamd's three classes, with its cause in words."""
    status = getattr(exc, "status_code", None)
    why = reason(exc, where, secret)
    if status in (400, 413, 422) or (status is not None and "response_format" in why):
        # (llama-cpp-python answers an unknown response_format with a 500 naming it)
        return InputRejected(f"the server rejected the input ({why})")
    if status in (401, 403, 404):
        hint = {401: "authentication failed: check the API key",
                403: "permission denied for this key or model",
                404: "not found: check base_url and the model name"}[status]
        return BackendMisconfigured(f"{hint} ({why})")
    if status is not None and status >= 500 and _CANNOT_WORK.search(why):
        # A server error that says the endpoint cannot work as configured (llama.cpp:
        # "Llama model must be created with embedding=True"): retrying cannot help.
        return BackendMisconfigured(f"the server cannot do this as configured ({why})")
    return BackendUnavailable(f"transient failure ({why})")


class _Caller:
    """Retries transient failures within a deadline, with jitter and Retry-After; once
    `stop` is set, starts no call and no retry (a backoff sleep ends at once)."""

    def __init__(self, config: CompleterConfig, breaker: Breaker,
                 sleep: Callable[[float], None] | None = None,
                 stop: threading.Event | None = None, where: str = "the server",
                 secret: str | None = None) -> None:
        self.config, self.breaker = config, breaker
        self.where, self.secret = where, secret
        self.stop = stop or threading.Event()
        self.sleep = sleep or self.stop.wait

    def call(self, fn: Callable[[float], Any]) -> Any:
        c = self.config
        deadline = time.monotonic() + c.call_deadline_seconds
        attempt = 0
        while True:
            if self.stop.is_set():
                raise Stopping("dreamd is stopping: no new calls")
            self.breaker.check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackendUnavailable(f"call deadline of {c.call_deadline_seconds:g} s passed")
            try:
                try:
                    result = fn(min(c.read_timeout_seconds, remaining))
                finally:
                    write_gate.resume()  # an error can skip the response hook
            except (openai.APIStatusError, openai.APIConnectionError, openai.APITimeoutError,
                    openai.APIResponseValidationError, ValueError) as exc:
                error = classify(exc, self.where, self.secret)
                if not isinstance(error, BackendUnavailable):
                    raise error from None
                self.breaker.failure(str(error))
                wait = retry_after(exc)
                if wait is not None and wait > c.retry_after_cap_seconds:
                    raise BackendUnavailable(
                        f"{error}; the server asked for {wait:g} s, more than the "
                        f"{c.retry_after_cap_seconds:g} s cap"
                    ) from None
                attempt += 1
                if attempt > c.retries:
                    raise BackendUnavailable(f"{error} after {attempt} attempts") from None
                if wait is None:
                    wait = min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                if time.monotonic() + wait >= deadline:
                    raise BackendUnavailable(f"{error}; no time left to retry") from None
                with write_gate.waiting():
                    self.sleep(wait)
                continue
            self.breaker.success()
            return result


# The ways servers take a JSON schema: OpenAI's structured outputs (also vLLM, Ollama,
# llama.cpp's own server), then llama-cpp-python's json_object with a schema.
SHAPES: tuple[Callable[[str, Any], dict[str, Any]], ...] = (
    lambda name, schema: {"type": "json_schema",
                          "json_schema": {"name": name, "schema": schema, "strict": True}},
    lambda name, schema: {"type": "json_object", "schema": schema},
)


# Words with which servers refuse a response_format they do not take.
_ABOUT_SCHEMA = re.compile(r"response_format|json_schema|json_object|schema|grammar",
                           re.IGNORECASE)


def _json_object(raw: str | None) -> bool:
    try:
        return isinstance(json.loads(raw or ""), dict)
    except ValueError:
        return False


class _HttpClient(openai.DefaultHttpxClient):
    """The SDK's HTTP client with its defaults, closing its pooled connections when
    dropped (as the client the SDK makes for itself does)."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def client(base_url: str, config: CompleterConfig, environ: dict[str, str] | None) -> Any:
    return openai.OpenAI(
        base_url=base_url,
        # Local servers need no key; the SDK insists on a non-empty string.
        api_key=api_key(config, environ) or "no-key",
        max_retries=0,
        timeout=openai.Timeout(config.read_timeout_seconds,
                               connect=config.connect_timeout_seconds),
        # A pool worker holds no share of the quiet-write gate while its request is out.
        http_client=_HttpClient(event_hooks={
            "request": [lambda request: write_gate.pause()],
            "response": [lambda response: write_gate.resume()],
        }),
    )


class _Connected:
    """A backend holding a pool of connections to the server: close() (or leaving a
    `with` block) hangs up, rather than whenever the garbage collector gets to it."""

    _client: Any

    def close(self) -> None:
        """Close the pooled connections to the server."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OpenAICompleter(_Connected):
    name = "openai"

    def __init__(self, config: CompleterConfig, environ: dict[str, str] | None = None,
                 sleep: Callable[[float], None] | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.model = config.model
        self.breaker = Breaker(config.breaker_failures, config.breaker_cooldown_seconds)
        url = server_url(config.base_url, environ)
        self._caller = _Caller(config, self.breaker, sleep, stop, where=url,
                               secret=api_key(config, environ))
        self._client = client(url, config, environ)
        # The SDK imports its chat resources on first use (~60 ms): here, before a pass,
        # not inside its first calls, where every worker would wait on the import.
        self._client.chat.completions  # noqa: B018
        # Per model: the response_format shape the server takes (an index into SHAPES;
        # past its end, none), and why none, where it refused them all or ignored one:
        # such a model's JSON tasks are asked by prompt and repaired.
        self._shape: dict[str, int] = {}
        self.schema_refused: dict[str, str] = {}

    def schema_shape(self, model: str) -> str | None:
        """The response_format type this server takes a schema in for `model` (as far as
        it has been asked), or None where it takes none."""
        shape = self._shape.get(model, 0)
        return SHAPES[shape]("", {})["type"] if shape < len(SHAPES) else None

    def models(self) -> list[str]:
        """The models the server lists (GET /models), asked once without retries: a probe.
        A server with no such list gives []; one that cannot be reached raises
        BackendUnavailable, one that refuses the key BackendMisconfigured."""
        try:
            page = self._client.models.list()  # the configured timeouts: a busy server
            # (llama.cpp serves one request at a time) answers after its current one
        except (openai.APIStatusError, openai.APIConnectionError,
                openai.APITimeoutError) as exc:
            if getattr(exc, "status_code", None) in (404, 405, 501):
                return []
            raise classify(exc, self._caller.where, self._caller.secret) from None
        return [str(m.id) for m in page.data]

    def model_for(self, prompt: Prompt) -> str:
        """The job's own model (its spec's model key names the [completer] key), else
        completer.model."""
        return getattr(self.config, prompt.model_key or "model", "") or self.config.model

    def complete(self, prompt: Prompt) -> Completion:
        model = self.model_for(prompt)
        messages = [{"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user}]
        shape = self._shape.get(model, 0) if prompt.schema is not None else len(SHAPES)

        def request(timeout: float) -> Any:
            extra = ({"response_format": SHAPES[shape](prompt.task, prompt.schema)}
                     if shape < len(SHAPES) else {})
            return self._client.chat.completions.create(
                model=model, messages=messages, temperature=self.config.temperature,
                max_tokens=self.config.max_output_tokens, timeout=timeout, **extra,
            )

        while True:
            try:
                response = self._caller.call(request)
                break
            except InputRejected as refused:
                if shape >= len(SHAPES) or not _ABOUT_SCHEMA.search(str(refused)):
                    raise  # refused for something else (too long, say): not the schema
                # Asked again in the next shape the servers know, then without one; the
                # shape that is taken is remembered for the model.
                if shape + 1 == len(SHAPES):
                    self.schema_refused[model] = f"refused it ({refused})"
                shape += 1
                self._shape[model] = shape
        choices = getattr(response, "choices", None) or []
        raw = choices[0].message.content if choices and choices[0].message else None
        if shape < len(SHAPES) and not _json_object(raw):
            # The server took the schema but its answer ignores it: it makes no grammar.
            self.schema_refused[model] = "took it but answered without it"
            self._shape[model] = len(SHAPES)
        text = clean(raw, prompt.task, prompt.max_chars)
        usage = getattr(response, "usage", None)
        if usage is not None and usage.prompt_tokens is not None:
            tokens_in, tokens_out = int(usage.prompt_tokens), int(usage.completion_tokens or 0)
        else:
            tokens_in = estimate_tokens(prompt.system + prompt.user)
            tokens_out = estimate_tokens(raw or "")
        return Completion(text=text, backend=self.name, model=model, tokens_in=tokens_in,
                          tokens_out=tokens_out)


class OpenAIEmbedder(_Connected):
    """Vectors from /v1/embeddings, stored under "openai:<model>" and never mixed."""

    def __init__(self, config: Config, environ: dict[str, str] | None = None,
                 stop: threading.Event | None = None) -> None:
        self.model = f"openai:{config.embed.model}"
        self._name = config.embed.model
        c = config.completer
        self.breaker = Breaker(c.breaker_failures, c.breaker_cooldown_seconds)
        base_url = config.embed.base_url or server_url(c.base_url, environ)
        self._caller = _Caller(c, self.breaker, stop=stop, where=base_url,
                               secret=api_key(c, environ))
        self._client = client(base_url, c, environ)
        self._dim: int | None = None
        self.calls = 0

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        try:
            response = self._caller.call(lambda timeout: self._client.embeddings.create(
                model=self._name, input=texts, timeout=timeout))
        except BackendError as exc:
            # Named as the embedder's, so a pass says what stopped: embedding, not the LLM.
            named = type(exc)(f"the embedder: {exc}")
            named.part = "embedder"
            raise named from None
        rows = sorted(response.data, key=lambda d: d.index)
        vectors = np.asarray([r.embedding for r in rows], dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise BackendUnavailable(f"asked for {len(texts)} vectors, got {vectors.shape[0]}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
        self._dim = self._dim or int(vectors.shape[1])
        result: np.ndarray = vectors
        return result

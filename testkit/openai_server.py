"""A real HTTP server on 127.0.0.1 that speaks the OpenAI API and can be told to fail.

    server = FakeOpenAI(); server.start(); ... server.plan("429:1", "ok"); ... server.stop()

POST /v1/chat/completions and /v1/embeddings. Each request takes the next behaviour from
the plan (default "ok"): ok, 429:SECONDS (Retry-After), 500, 503, 400, 401, 404, 413
(any status, optionally with the server's message: "500:MESSAGE"), say:TEXT (answer
exactly TEXT, "\\n" for a newline: a weak model's junk),
hang:SECONDS, malformed, empty, nousage, badjson. `delay` adds latency to every call.
`context_tokens` makes it a model with that context window: a chat request whose prompt
and max_tokens add up to more is answered 400 context_length_exceeded, as OpenAI does.
Answers are deterministic and say which task they answer; usage is counted and summed.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 16


HOLD_SECONDS = 10.0


def task_of(system: str) -> str:
    for marker, task in (("Update the gist", "summarize"), ("Merge partial", "merge"),
                         ("Maintain the profile", "profile"), ("digest of", "era"),
                         ("current narrative", "narrative"), ("facts about people", "facts"),
                         ("JSON object", "reflect")):
        if marker in system:
            return task
    return "other"


_TURN = re.compile(r"^\[(\d+)\] (?:[A-Z][a-z]+day \d+ [A-Z][a-z]+ \d{4}\. )?([^:]+): (.*)$")
_KNOWN = re.compile(r"^#(\d+) ([^(:]+?)(?: \(([^)]+)\))?: ")


def facts_answer(lines: list[str]) -> str:
    """A deterministic structured extraction: one fact a turn that says "I ...", about a
    home when it says "moved to", replacing the speaker's known home."""
    homes = {m.group(2): int(m.group(1)) for ln in lines if (m := _KNOWN.match(ln))
             and m.group(3) == "home"}
    facts = []
    for line in lines:
        m = _TURN.match(line)
        if not m or " I " not in f" {m.group(3)} ":
            continue
        turn, speaker, text = int(m.group(1)), m.group(2), m.group(3)
        home = "moved to" in text
        facts.append({"subject": speaker,
                      "statement": f"{speaker} said: " + text.replace("I ", f"{speaker} ")[:120],
                      "about": "home" if home else None, "valid_from": None, "turns": [turn],
                      "replaces": [homes[speaker]] if home and speaker in homes else []})
    return json.dumps({"facts": facts})


def answer(system: str, user: str) -> str:
    task = task_of(system)
    data = [ln for ln in user.splitlines() if ln and not ln.startswith("<")]
    last = data[-1] if data else ""
    if task == "facts":
        return facts_answer(data)
    if task == "reflect":
        return json.dumps({"mood": "curious", "mood_score": 0.4, "energy": 0.6,
                           "self_narrative": "I have been listening closely.",
                           "reflection": f"Noticed: {last[:60]}", "topics": ["testing"]})
    # Grounded as a real answer must be: every number and name it holds is in its input.
    return f"<think>scratch</think>Here is the {task}:\n- {task.upper()} of the lines; " \
           f"the last says {last[:80]}"


_FILLER = ("river lamp quiet garden morning letter window travel music paper coffee bridge "
           "market season friend harbor evening walk city train book kitchen rain summer "
           "office plan dinner weekend sister doctor ticket concert").split()


def is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def padded(content: str, size: int) -> str:
    """`content` grown to `size` characters with sentences that never repeat, like a real
    model's longer answer (a repeated filler would be a loop, which dreamd rejects)."""
    sentences, i = [content if content.endswith(".") else content + "."], 0
    while sum(len(x) + 1 for x in sentences) < size:
        seed = hashlib.sha256(f"{content}|{i}".encode()).digest()
        sentences.append(" ".join(_FILLER[b % len(_FILLER)] for b in seed[:9]).capitalize() + ".")
        i += 1
    return " ".join(sentences)[:size]


class FakeOpenAI:
    def __init__(self, delay: float = 0.0, pad: int = 0, context_tokens: int = 0,
                 schema: str = "honour", hold: dict[str, str] | None = None,
                 answers: dict[str, str] | None = None,
                 author: Callable[[str, str], str | None] | None = None) -> None:
        """`context_tokens`: the model's window (longer requests are refused, /props
        reports it as llama.cpp's server does). `schema`, what a `response_format` JSON
        schema meets: "honour" (the answer follows it, as a grammar makes it), "refuse"
        (400, as a server without structured outputs), "ignore" (taken, not followed),
        "json_object" (llama-cpp-python's: json_schema is a 500, a json_object with a
        schema is honoured). `answers`: see below. `hold`, task -> task: a request of
        the first is answered only once one of the second has come (or after
        HOLD_SECONDS), so that a test can see two tasks asked at once whatever the
        machine's speed."""
        self.delay = delay
        self.schema = schema
        # A request's user message -> the answer to give it (a corpus of what a capable
        # model writes, see testkit.requests); any other request gets `answer`.
        self.answers = answers or {}
        # (system, user) -> the answer, or None for `answer`'s: answers made from the request
        # itself (a request that shows earlier answers, as a facts batch shows the known
        # facts, cannot be looked up by its text before they are given).
        self.author = author
        self.context_tokens = context_tokens
        self.largest_request = 0  # prompt + max_tokens of the largest chat request served
        self.refused = 0  # chat requests refused as longer than the context window
        self.pad = pad  # pad answers to this many characters, like a real gist
        self._plan: collections.deque[str] = collections.deque()
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.connections = 0  # open now: a client that closes its pool hangs up
        # Requests of each task (summarize, facts, ...) inside their delay now, and the most
        # there ever were at once.
        self.in_flight: collections.Counter[str] = collections.Counter()
        self.peak: collections.Counter[str] = collections.Counter()
        # The most requests of any tasks there were at once, and which tasks were ever
        # inside their delay together.
        self.peak_all = 0
        self.together: set[frozenset[str]] = set()
        self.hold = hold or {}
        self.came: collections.defaultdict[str, threading.Event] = \
            collections.defaultdict(threading.Event)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def plan(self, *behaviours: str) -> None:
        with self.lock:
            self._plan.extend(behaviours)

    def next_behaviour(self) -> str:
        with self.lock:
            return self._plan.popleft() if self._plan else "ok"

    def tasks(self) -> list[str]:
        return [task_of(r["body"]["messages"][0]["content"]) for r in self.requests
                if r["path"].endswith("/chat/completions") and "messages" in r["body"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (Handler,), {"fake": self})


class Handler(BaseHTTPRequestHandler):
    """The fake server's answers; `fake` is the server whose plan and counts it keeps."""

    fake: FakeOpenAI

    # Keep-alive, as every real OpenAI-compatible server does: a client's pooled
    # connection is reused instead of opening one (and a server thread) per call.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, *_: Any) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        with self.fake.lock:
            self.fake.connections += 1

    def finish(self) -> None:
        with self.fake.lock:
            self.fake.connections -= 1
        super().finish()

    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None
              ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)  # the client may have timed out and gone

    def error(self, status: int, headers: dict[str, str] | None = None,
              message: str | None = None) -> None:
        said = message or f"told to fail with {status}"
        body = json.dumps({"error": {"message": said, "type": "test",
                                     "code": status}}).encode()
        self.reply(status, body, headers)

    def do_GET(self) -> None:
        with self.fake.lock:
            self.fake.requests.append({"path": self.path, "body": {}, "behaviour": "get",
                                  "auth": self.headers.get("Authorization", "")})
        if self.path.endswith("/models"):
            return self.reply(200, json.dumps({"object": "list", "data": [
                {"id": "test-model", "object": "model"}]}).encode())
        if self.path == "/props" and self.fake.context_tokens:
            return self.reply(200, json.dumps({"default_generation_settings": {
                "n_ctx": self.fake.context_tokens}}).encode())
        return self.error(404, message="not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        behaviour = self.fake.next_behaviour()
        with self.fake.lock:
            self.fake.requests.append({"path": self.path, "body": body,
                                  "behaviour": behaviour,
                                  "auth": self.headers.get("Authorization", "")})
        task = (task_of(body["messages"][0]["content"])
                if body.get("messages") else self.path)
        with self.fake.lock:
            came = self.fake.came[task]
            waits_for = self.fake.came[self.fake.hold[task]] if task in self.fake.hold else None
            self.fake.in_flight[task] += 1
            self.fake.peak[task] = max(self.fake.peak[task], self.fake.in_flight[task])
            self.fake.peak_all = max(self.fake.peak_all, sum(self.fake.in_flight.values()))
            self.fake.together.add(frozenset(t for t, n in self.fake.in_flight.items() if n))
        came.set()
        try:
            if waits_for is not None:  # held, in flight, until the other asks
                waits_for.wait(HOLD_SECONDS)
            if self.fake.delay:
                time.sleep(self.fake.delay)
        finally:
            with self.fake.lock:
                self.fake.in_flight[task] -= 1
        kind, _, arg = behaviour.partition(":")
        if kind == "hang":
            time.sleep(float(arg or 30))
            return self.error(504)
        if kind == "429":
            return self.error(429, {"Retry-After": arg or "1"})
        if kind.isdigit():
            return self.error(int(kind), message=arg or None)
        if kind == "malformed":
            return self.reply(200, b'{"id": "x", "choices": [ {not json')
        if self.path.endswith("/embeddings"):
            return self.embeddings(body)
        if not self.path.endswith("/chat/completions"):
            return self.error(404, message="not found")
        return self.chat(body, kind, arg)

    def embeddings(self, body: dict[str, Any]) -> None:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(texts):
            seed = hashlib.sha256(str(text).encode()).digest()
            data.append({"object": "embedding", "index": i,
                         "embedding": [b / 255 - 0.5 for b in seed[:DIM]]})
        tokens = sum(len(str(t)) // 4 + 1 for t in texts)
        self.reply(200, json.dumps({"object": "list", "data": data,
                                    "model": body["model"],
                                    "usage": {"prompt_tokens": tokens,
                                              "total_tokens": tokens}}).encode())

    def chat(self, body: dict[str, Any], kind: str, arg: str = "") -> None:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        asked = (len(system) + len(user)) // 4 + int(body.get("max_tokens") or 0)
        if self.fake.context_tokens and asked > self.fake.context_tokens:
            with self.fake.lock:
                self.fake.refused += 1
            return self.error(400, message=(
                f"This model's maximum context length is {self.fake.context_tokens} "
                f"tokens. However, you requested {asked} tokens. Please reduce the "
                "length of the messages or completion. (context_length_exceeded)"))
        with self.fake.lock:
            self.fake.largest_request = max(self.fake.largest_request, asked)
        shape = body.get("response_format") or {}
        shaped = shape.get("type") == "json_schema" or "schema" in shape
        if shaped and self.fake.schema == "refuse":
            return self.error(400, message=f"response_format type {shape['type']} "
                              "is not supported")
        if shape.get("type") == "json_schema" and self.fake.schema == "json_object":
            return self.error(500, message="1 validation error: body.response_format"
                              ".type: Input should be 'text' or 'json_object'")
        content = self.fake.answers.get(user) or (
            self.fake.author(system, user) if self.fake.author else None) or answer(system, user)
        if self.fake.pad and task_of(system) not in ("reflect", "facts"):
            content = padded(content, self.fake.pad)
        if kind == "say":  # answer like a weak model: exactly this text
            content = arg.replace("\\n", "\n")
        elif kind == "empty":
            content = ""
        elif kind == "badjson":
            content = "I feel fine, thanks for asking!"
        if shaped and self.fake.schema in ("honour", "json_object") and \
                not is_object(content):
            content = answer(system, user)  # a grammar allows nothing else
        prompt_tokens = (len(system) + len(user)) // 4
        completion_tokens = len(content) // 4 + 1
        response: dict[str, Any] = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
        }
        if kind != "nousage":
            response["usage"] = {"prompt_tokens": prompt_tokens,
                                 "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}
            with self.fake.lock:
                self.fake.prompt_tokens += prompt_tokens
                self.fake.completion_tokens += completion_tokens
        self.reply(200, json.dumps(response).encode())


def main() -> None:
    """Serve in a process of its own: `python -m testkit.openai_server DELAY [PAD]`.

    Prints the base URL on the first line, then serves until killed.
    """
    import sys

    delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    pad = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = FakeOpenAI(delay=delay, pad=pad)
    print(server.base_url, flush=True)
    server.server.serve_forever()


if __name__ == "__main__":
    main()

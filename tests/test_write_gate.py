"""Quiet writes: the pass thread's writes never overlap a worker's computing, and the
openai backend gives its share back while it waits on the network or backs off."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dreamd.backends import write_gate
from dreamd.backends.hashing import HashingEmbedder
from dreamd.config import CompleterConfig
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.budget import Budget
from dreamd.dream.jobs.pool import run_items
from dreamd.models import Completion, Prompt
from testkit.openai_server import FakeOpenAI
from tests.helpers import PROMPT, completer, config_for, open_sqlite, wait_for


class NetworkCompleter:
    """Stands in for an LLM backend in the context; the test's own think does the work."""

    name = "network"
    model = "network"

    def complete(self, prompt: Prompt) -> Completion:
        raise AssertionError("not called")


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_no_save_overlaps_a_worker_computing(tmp_path: Path) -> None:
    config = config_for(tmp_path / "m.db", completer=CompleterConfig(workers=4))
    store = open_sqlite(config)
    ctx = JobContext.for_pass(store, config, HashingEmbedder(), NetworkCompleter(), Budget(),
                              epoch="0")  # as a pass begins: nothing forgotten yet
    assert ctx.asking.calls_at_once == 4
    lock = threading.Lock()
    computing: list[tuple[float, float]] = []
    saves: list[tuple[float, float]] = []

    def compute(seconds: float) -> None:
        start = time.perf_counter()
        spin(seconds)
        with lock:
            computing.append((start, time.perf_counter()))

    def think(item: int) -> int:
        compute(0.003)  # build the request
        write_gate.pause()
        time.sleep(0.02)  # the network
        write_gate.resume()
        compute(0.003)  # parse the answer
        return item

    def save(conn: object, item: int, value: int) -> bool:
        start = time.perf_counter()
        spin(0.0005)
        saves.append((start, time.perf_counter()))
        return True

    tally = run_items(ctx, range(60), prepare=lambda i: i, think=think, save=save,
                      on_error=lambda item, exc: str(exc))
    store.close()
    assert tally.done == 60 and len(computing) == 120
    overlaps = [(s, c) for s in saves for c in computing if c[0] < s[1] and s[0] < c[1]]
    assert not overlaps


@pytest.mark.parametrize("plan", [["ok"], ["429:4", "ok"]], ids=["request out", "backoff"])
def test_the_openai_backend_holds_no_share_while_it_waits(plan: list[str]) -> None:
    # The wait (the answer's delay, or the Retry-After) is long enough that a busy machine
    # cannot step over it between two looks.
    server = FakeOpenAI(delay=4.0 if plan == ["ok"] else 0.0).start()
    server.plan(*plan)
    client = completer(server, read_timeout_seconds=10, call_deadline_seconds=20)
    gate = write_gate.Gate(drain_seconds=30.0)
    result: list[Completion] = []
    worker = threading.Thread(target=lambda: result.append(gate.run(client.complete, PROMPT)))
    try:
        worker.start()
        # The request is out (or the 429 came back and the backoff began): the worker,
        # still inside its call, has given its share back.
        assert wait_for(lambda: bool(server.requests) and gate.busy == 0 and not result, 30)
        with gate.closed():
            assert gate.busy == 0  # closing did not have to wait for the worker
            time.sleep(0.5)
            assert worker.is_alive() and not result  # may not parse an answer meanwhile
        worker.join(30)
    finally:
        client.close()
        server.stop()
    assert result and result[0].text
    assert len(server.requests) == len(plan)

"""/metrics: Prometheus text from prometheus-client. The memory's figures are read from
the store at each scrape (what `dreamd status` reads); the server's own requests are
counted as they happen. One registry per app, not the process-wide default."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from dreamd import report
from dreamd.config import Config
from dreamd.dream.factory import embedder_model_name
from dreamd.serve.memories import Memories

THRESHOLDS = ("continuity", "coherence", "curiosity")


class Metrics:
    def __init__(self, memories: Memories, config: Config) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Memory(memories, config))
        self._requests = Histogram(
            "dreamd_http_request_seconds", "HTTP requests served, by route and status.",
            ["route", "method", "status"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self._requests.labels(route, method, str(status)).observe(seconds)

    def scrape(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Memory(Collector):
    def __init__(self, memories: Memories, config: Config) -> None:
        self.memories, self.config = memories, config

    def describe(self) -> list[Any]:
        return []  # read at each scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        with self.memories.memory() as memory:
            state = report.status(memory.store, self.config,
                                  embedder_model_name(self.config), datetime.now(UTC), 1)
        drives = GaugeMetricFamily("dreamd_drive_level", "Each drive's level now, in [0, 1].",
                                   labels=["drive"])
        for drive, level in state["drives"].items():
            drives.add_metric([drive], float(level))
        yield drives
        thresholds = GaugeMetricFamily("dreamd_drive_threshold",
                                       "The level at which a drive runs its jobs.",
                                       labels=["drive"])
        for drive in THRESHOLDS:
            thresholds.add_metric([drive], getattr(self.config.drives, f"{drive}_threshold"))
        yield thresholds
        backlog = GaugeMetricFamily("dreamd_backlog", "What waits to be consolidated.",
                                    labels=["kind"])
        for kind, value in state["backlog"].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                backlog.add_metric([kind], float(value))
        yield backlog
        yield GaugeMetricFamily("dreamd_failures", "Items failing and waiting to retry.",
                                value=len(state["failures"]))
        yield GaugeMetricFamily("dreamd_quarantined", "Items quarantined after repeated "
                                "failures (dreamd retry releases them).",
                                value=len(state["quarantined"]))
        yield from _last_pass(state["runs"][0] if state["runs"] else None)


def _last_pass(run: dict[str, Any] | None) -> Iterator[Any]:
    if run is None:
        return
    started, ended = run.get("started_at"), run.get("ended_at")
    if started and ended:
        seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started))
        yield GaugeMetricFamily("dreamd_last_pass_seconds", "How long the last pass took.",
                                value=seconds.total_seconds())
        yield GaugeMetricFamily("dreamd_last_pass_end_timestamp_seconds",
                                "When the last pass ended (Unix time).",
                                value=datetime.fromisoformat(ended).timestamp())
    jobs = GaugeMetricFamily("dreamd_last_pass_job_seconds", "Each job's time in the last "
                             "pass.", labels=["job"])
    for job in run.get("jobs") or []:
        jobs.add_metric([job["job"]], float(job.get("seconds") or 0))
    yield jobs
    answers = GaugeMetricFamily(
        "dreamd_last_pass_answers", "What became of the model's answers in the last pass, "
        "by job: asked, kept_first, asked_again, kept_again, refused, fell_back, "
        "reask_tokens, refused_first:<check> and dropped:<check> (facts).",
        labels=["job", "count"])
    for job in run.get("jobs") or []:
        for count, n in (job.get("answers") or {}).items():
            answers.add_metric([job["job"], count], float(n))
    yield answers
    tokens = GaugeMetricFamily("dreamd_last_pass_tokens", "LLM tokens of the last pass.",
                               labels=["direction"])
    tokens.add_metric(["in"], float(run.get("tokens_in") or 0))
    tokens.add_metric(["out"], float(run.get("tokens_out") or 0))
    yield tokens
    lock = run.get("write_lock") or {}
    held = GaugeMetricFamily("dreamd_last_pass_write_lock_seconds", "How long the last "
                             "pass held the store's write lock: in all, its longest "
                             "write, and the time its writes waited for locks.",
                             labels=["stat"])
    for stat, key in (("total", "held_ms"), ("longest", "longest_ms"), ("waited", "waited_ms")):
        if isinstance(lock.get(key), int | float):
            held.add_metric([stat], lock[key] / 1000)
    yield held
    yield GaugeMetricFamily("dreamd_last_pass_failed", "1 when the last pass's outcome "
                            "was not ok.", value=float(run.get("outcome") != "ok"))

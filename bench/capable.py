"""The LoCoMo dev slice answered as a capable model answers: a forced pass over each
conversation against the test server, whose summarize requests are answered with the
slice's own session summaries and whose facts requests with its observations (both written
for the benchmark by a capable model that never saw dreamd or its guards, one per session
and one per fact with the turns it rests on). What dreamd keeps of them, and the requests
it sends per item.

    python -m bench.capable [PATH]      # default ../shared/data/locomo_dev.json

Nothing is chosen on the slice: every figure is held out. A request the slice has no
answer for (a session summarized in parts, their merge, the tiers above the gists) gets
the test server's own answer, and is counted apart. The slice stays where it is (its
licence is not the project's): the answers are rebuilt from it on every run.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamd.backends.local import LocalEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.config import CompleterConfig, Config
from dreamd.dream.cycle import run_pass
from dreamd.memory.importers import parse_locomo, write_sessions
from dreamd.store.interface import Store
from dreamd.store.opening import open_store
from dreamd.store.sqlite import app_file
from testkit.openai_server import FakeOpenAI, task_of

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo_dev.json"
_FACT_TURN = re.compile(r"^\[(\d+)\] ", re.MULTILINE)
WHOLE = 0.9  # a summarize request showing this share of a session's turns asks for its gist


@dataclass
class Author:
    """Answers dreamd's requests for one conversation from the slice's own answers."""

    conv: dict[str, Any]
    dia: dict[str, int]  # dia_id -> the turn's id in the store
    served: Counter[str] = field(default_factory=Counter)  # requests answered, by task
    unanswered: Counter[str] = field(default_factory=Counter)  # left to the server
    statements: set[str] = field(default_factory=set)  # every fact statement given

    def __call__(self, system: str, user: str) -> str | None:
        task = task_of(system)
        found = self.gist(user) if task == "summarize" else \
            self.facts(user) if task == "facts" else None
        (self.served if found is not None else self.unanswered)[task] += 1
        return found

    def gist(self, user: str) -> str | None:
        """The session's summary, for a request that shows (nearly) all of its turns."""
        body = self.conv["conversation"]
        best, share = None, 0.0
        for key, summary in self.conv["session_summary"].items():
            turns = body.get(key.removesuffix("_summary"), [])
            shown = sum(t["text"][:80] in user for t in turns) / max(1, len(turns))
            if shown > share:
                best, share = summary, shown
        if best is None or share < WHOLE:
            return None
        return str(best)

    def facts(self, user: str) -> str | None:
        """The observations whose turns are all among the request's."""
        shown = {int(i) for i in _FACT_TURN.findall(user)}
        out = []
        for session in self.conv["observation"].values():
            for speaker, items in session.items():
                for statement, evidence in items:
                    ids = [self.dia.get(e) for e in
                           (evidence if isinstance(evidence, list) else [evidence])]
                    if ids and all(i in shown for i in ids):
                        out.append({"subject": speaker, "statement": statement, "about": None,
                                    "valid_from": None, "turns": sorted({int(i or 0)
                                                                         for i in ids}),
                                    "replaces": []})
        if not shown:
            return None
        self.statements.update(f["statement"].strip() for f in out)
        return json.dumps({"facts": out})


def dia_ids(store: Store, conv: dict[str, Any]) -> dict[str, int]:
    """dia_id -> the turn's id, by the importer's order (one row per turn, in order)."""
    by_session: dict[str, list[int]] = {}
    with store.read() as conn:
        for turn_id, session_id in conn.execute(
                "SELECT id, session_id FROM exchanges ORDER BY id"):
            by_session.setdefault(session_id, []).append(turn_id)
    out = {}
    for key, turns in conv["conversation"].items():
        if key.startswith("session_") and key.count("_") == 1:
            ids = by_session[f"locomo:{conv['sample_id']}:{key.split('_')[1]}"]
            for position, turn in enumerate(turns):
                out[turn["dia_id"]] = ids[position]
    return out


@dataclass
class Outcome:
    """One conversation's pass: what dreamd kept of the capable answers."""

    sample: str
    sessions: int
    gists_kept: int  # sessions whose stored gist is the model's
    gists_asked: int  # summarize requests the slice answered
    summarize_requests: int
    facts_given: int
    facts_kept: int  # given statements found among the stored facts
    facts_requests: int
    facts_asks: int  # distinct facts requests (a re-ask repeats one)
    answers: dict[str, dict[str, int]]  # the pass record's, by job
    unanswered: Counter[str]


def measured(conv: dict[str, Any], embedder: LocalEmbedder) -> Outcome:
    sessions = parse_locomo([conv], "locomo_dev.json")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        with app_file.created(db):
            pass
        server = FakeOpenAI().start()
        try:
            config = Config(db=str(db), completer=CompleterConfig(
                backend="openai", base_url=server.base_url, model="capable",
                read_timeout_seconds=30))
            store = open_store(config)
            write_sessions(store, sessions)
            author = Author(conv, dia_ids(store, conv))
            server.author = author
            with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as llm:
                run_pass(store, config, embedder, llm, trigger="bench", force=True)
            with store.read() as read:
                gists = list(read.execute("SELECT dreamd_source, content FROM summaries"))
                stored = {r[0].strip() for r in read.execute("SELECT statement FROM facts")}
                jobs = json.loads(read.execute("SELECT jobs FROM dreamd_runs ORDER BY id DESC "
                                               "LIMIT 1").fetchone()[0])
            store.close()
        finally:
            server.stop()
    asked = [r["body"]["messages"][-1]["content"] for r in server.requests
             if r["path"].endswith("/chat/completions")
             and task_of(r["body"]["messages"][0]["content"]) == "facts"]
    return Outcome(
        conv["sample_id"], len(sessions),
        sum(src.startswith("llm:") for src, _ in gists),
        author.served["summarize"], server.tasks().count("summarize"),
        len(author.statements), len(author.statements & stored), len(asked), len(set(asked)),
        {j["job"]: j.get("answers", {}) for j in jobs if j.get("answers")},
        author.unanswered)


def lines(outcomes: list[Outcome]) -> list[str]:
    """The acceptance lines: per conversation and in all, gists and facts kept from the
    model, requests per item, and why answers were refused."""
    out = []
    for o in [*outcomes, total(outcomes)]:
        out.append(
            f"{o.sample:<8} gists kept from the model {o.gists_kept}/{o.sessions} "
            f"({o.gists_asked} sessions answered whole), {o.summarize_requests} summarize "
            f"requests ({o.summarize_requests / max(1, o.sessions):.2f} a session); facts kept "
            f"{o.facts_kept}/{o.facts_given} ({100 * o.facts_kept / max(1, o.facts_given):.1f} "
            f"%), {o.facts_requests} facts requests for {o.facts_asks} batches "
            f"({o.facts_requests / max(1, o.facts_asks):.2f} a batch)")
    every = total(outcomes)
    for job, counts in sorted(every.answers.items()):
        out.append(f"  {job}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if every.unanswered:
        out.append("  left to the server (the slice has no answer): " + ", ".join(
            f"{k} {v}" for k, v in sorted(every.unanswered.items())))
    return out


def total(outcomes: list[Outcome]) -> Outcome:
    answers: dict[str, Counter[str]] = {}
    for o in outcomes:
        for job, counts in o.answers.items():
            answers.setdefault(job, Counter()).update(counts)
    def add(name: str) -> int:
        return sum(int(getattr(o, name)) for o in outcomes)

    return Outcome("all", add("sessions"), add("gists_kept"), add("gists_asked"),
                   add("summarize_requests"), add("facts_given"), add("facts_kept"),
                   add("facts_requests"), add("facts_asks"),
                   {j: dict(c) for j, c in answers.items()},
                   sum((o.unanswered for o in outcomes), Counter()))


def report(path: Path = DATA) -> None:
    embedder = LocalEmbedder()
    outcomes = [measured(conv, embedder) for conv in json.loads(path.read_text("utf-8"))]
    print("dev slice (LoCoMo), answered with its own summaries and observations:")
    print("\n".join(f"  {line}" for line in lines(outcomes)))


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    if not path.exists():
        sys.exit(f"no dev slice at {path} (give its path)")
    report(path)


if __name__ == "__main__":
    main()

"""Memory quality on public benchmarks and on the shipped sample, with the embedded default.

    python -m bench.quality [--completer extractive|openai] [demo] [longmemeval PATH] [locomo PATH]

Defaults to the demo and the dev slices in ../shared/data; the full public files work the
same way. `--completer openai` fills the tiers through the OpenAI API path instead, against
the local test server's deterministic answers (this shows the path works end to end; its
figures say nothing about a real model's).
demo: the shipped sample conversations, one full pass; the profile (and the current facts)
judged against testkit/remembered.py, the hand-written list of what a friend would keep and
of lines no profile may hold: precision, recall, never-lines.
LongMemEval_S: each question against its own haystack (imported into a fresh file, one
full pass), session-level recall_any@5/@10 and NDCG@10, overall and per question type.
LoCoMo: every conversation imported, one full pass, evidence-turn recall@5/10/25 per
category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from dreamd.backends.extractive import ExtractiveCompleter
from dreamd.backends.local import LocalEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.protocols import Completer
from dreamd.cli.demo import sample_sessions
from dreamd.cli.demo import write_sessions as write_sample
from dreamd.config import CompleterConfig, Config, UserConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.keys import dated
from dreamd.ids import DEFAULT_USER, profile_id
from dreamd.memory.api import Memory
from dreamd.memory.importers import parse_locomo, parse_longmemeval, write_sessions
from dreamd.runtime.log import configure
from dreamd.store import app_file
from dreamd.store.facts import facts_of
from dreamd.store.opening import open_store
from dreamd.store.tiers import profile_row
from dreamd.store.turns import turns_by_id
from dreamd.text import STOPWORDS
from testkit.openai_server import FakeOpenAI
from testkit.remembered import judged

_WORDS = re.compile(r"\w+")
DATA = Path(__file__).parent.parent.parent / "shared" / "data"


class Backend:
    """The completer every pass of this run uses: the extractive default, or the OpenAI
    API path against the local test server."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server = FakeOpenAI().start() if name == "openai" else None

    def config(self, db: Path, **changes: Any) -> Config:
        config = Config(db=str(db), **changes)
        if self.server is None:
            return config
        return dataclasses.replace(config, completer=CompleterConfig(
            backend="openai", base_url=self.server.base_url, model="quality",
            read_timeout_seconds=10))

    def completer(self, config: Config, embedder: LocalEmbedder) -> Completer:
        if self.server is None:
            return ExtractiveCompleter(embedder)
        return OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "sk-quality"})

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def consolidated(db: Path, sessions: list[Any], embedder: LocalEmbedder,
                 backend: Backend, **changes: Any) -> Memory:
    """`sessions` imported into a new file at `db` (the shipped sample written like a chat
    app when it is None), one full pass, and the memory to read it with."""
    config = backend.config(db, **changes)
    if not sessions:
        with app_file.created(db) as conn:
            write_sample(conn, sample_sessions())
    store = open_store(config)
    write_sessions(store, sessions)
    run_pass(store, config, embedder, backend.completer(config, embedder), trigger="quality",
             force=True)
    store.close()
    return Memory(db, config=config, embedder=embedder)


def demo(embedder: LocalEmbedder, backend: Backend) -> None:
    """The shipped sample: the profile and the current facts against what a friend would
    keep (testkit/remembered.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        memory = consolidated(Path(tmp) / "m.db", [], embedder, backend,
                              user=UserConfig(name="Sam"))
        with memory.store.read() as conn:
            profile = profile_row(conn, profile_id(DEFAULT_USER))
            facts = facts_of(conn, DEFAULT_USER, current_only=True)
        memory.close()
    print(judged(profile.content if profile else "").line(f"demo {backend.name} profile"))
    print(judged("\n".join(f"- {f.statement}" for f in facts)).line(
        f"demo {backend.name} current facts"))


def ranked_sessions(memory: Memory, query: str, words_too: bool) -> list[str]:
    """Sessions in the order of their best turn."""
    order: list[str] = []
    for hit in memory.recall(query, k=200, words_too=words_too):
        if hit.session_id not in order:
            order.append(hit.session_id)
    return order


def ndcg(ranked: list[str], relevant: set[str], k: int) -> float:
    gain = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:k]) if s in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return gain / ideal if ideal else 0.0


def longmemeval(path: Path, embedder: LocalEmbedder, backend: Backend) -> None:
    questions = json.loads(path.read_text())
    results: dict[str, dict[str, list[float]]] = {"hybrid": defaultdict(list),
                                                  "vector": defaultdict(list)}
    facts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for question in questions:
        relevant = {f"lme:{s}" for s in question.get("answer_session_ids", [])}
        if not relevant:
            continue  # abstention questions have no evidence
        with tempfile.TemporaryDirectory() as tmp:
            memory = consolidated(Path(tmp) / "m.db", parse_longmemeval([question], str(path)),
                                  embedder, backend)
            for mode, words in (("hybrid", True), ("vector", False)):
                ranked = ranked_sessions(memory, question["question"], words)
                row = results[mode]
                for key in ("all", question["question_type"]):
                    row[f"{key}|r5"].append(float(bool(relevant & set(ranked[:5]))))
                    row[f"{key}|r10"].append(float(bool(relevant & set(ranked[:10]))))
                    row[f"{key}|ndcg10"].append(ndcg(ranked, relevant, 10))
            if question["question_type"] in ("knowledge-update", "single-session-user"):
                facts[question["question_type"]].append(in_facts(memory, question))
            memory.close()
    for kind, found in facts.items():
        n = len(found)
        print(f"longmemeval facts  {kind:<26} n={n:<3} answer in the current facts or profile "
              f"{100 * sum(now for now, _ in found) / n:5.1f}; answer only in a replaced fact "
              f"{100 * sum(old for _, old in found) / n:5.1f}")
    for mode, row in results.items():
        keys = sorted({k.split("|")[0] for k in row}, key=lambda k: (k != "all", k))
        for key in keys:
            n = len(row[f"{key}|r5"])
            print(f"longmemeval {mode:<6} {key:<26} n={n:<3} recall_any@5 "
                  f"{100 * sum(row[f'{key}|r5']) / n:5.1f}  @10 "
                  f"{100 * sum(row[f'{key}|r10']) / n:5.1f}  NDCG@10 "
                  f"{100 * sum(row[f'{key}|ndcg10']) / n:5.1f}")


def in_facts(memory: Memory, question: dict[str, Any]) -> tuple[float, float]:
    """Whether the answer's words are in the current facts or the profile, and whether
    they are only in a fact since replaced (an old value shown as the answer)."""
    words = set(_WORDS.findall(str(question["answer"]).lower())) - STOPWORDS
    with memory.store.read() as conn:
        facts = facts_of(conn, DEFAULT_USER)
        profile = profile_row(conn, profile_id(DEFAULT_USER))
    current = " ".join([f.statement for f in facts if f.current]
                       + [profile.content if profile else ""]).lower()
    replaced = " ".join(f.statement for f in facts if not f.current).lower()
    now = bool(words) and all(w in current for w in words)
    old = bool(words) and not now and all(w in replaced for w in words)
    return float(now), float(old)


def locomo(path: Path, embedder: LocalEmbedder, backend: Backend) -> None:
    """Per category, and per conversation (each conversation is its own file: a figure for
    one conversation never saw the others)."""
    scores = locomo_scores(path, embedder, backend)
    names = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop",
             "all": "all"}
    convs = sorted({k.split("|")[0] for k in scores if k.startswith("conv ")})
    for cat in ("all", "1", "2", "3", "4", *convs):
        n = len(scores[f"{cat}|5"])
        if n:
            def pct(name: str, cat: str = cat, n: int = n) -> str:
                return f"{100 * sum(scores[f'{cat}|{name}']) / n:5.1f}"
            print(f"locomo {names.get(cat, cat):<12} n={n:<4} evidence recall@5 {pct('5')}  "
                  f"@10 {pct('10')}  @25 {pct('25')} (vector only @10 {pct('vector10')}); "
                  f"1000-token context: evidence inside {pct('inside')}, answer words "
                  f"{pct('words')} (consolidated tiers alone {pct('tiers')}), whole answer "
                  f"{pct('context')}")


def locomo_scores(path: Path, embedder: LocalEmbedder,
                  backend: Backend) -> dict[str, list[float]]:
    """`category|measure`, `all|measure` and `conv <id>|measure` -> one value per question."""
    data = json.loads(path.read_text())
    scores: dict[str, list[float]] = defaultdict(list)
    for conv in data:  # each conversation in a file of its own: recall stays within it
        sample = conv["sample_id"]
        with tempfile.TemporaryDirectory() as tmp:
            memory = consolidated(Path(tmp) / "m.db", parse_locomo([conv], str(path)), embedder,
                                  backend)
            ids = dia_ids(memory, conv)
            with memory.store.read() as conn:
                turns = turns_by_id(conn, list(ids.values()))
            texts = {i: t.content for i, t in turns.items()}
            shown = {i: dated(t.content, t.created_at) for i, t in turns.items()}
            for qa in conv["qa"]:
                category = qa.get("category")
                evidence = {ids[e] for e in qa.get("evidence", []) if e in ids}
                if category not in (1, 2, 3, 4) or not evidence:
                    continue  # adversarial questions, malformed evidence ids
                hits = [h.exchange_id for h in memory.recall(qa["question"], k=25)]
                plain = [h.exchange_id for h in memory.recall(qa["question"], k=10,
                                                              words_too=False)]
                block = memory.context(f"question:{sample}", query=qa["question"],
                                       budget=1000).text.lower()
                answer = str(qa["answer"]).lower()
                words = set(_WORDS.findall(answer)) - STOPWORDS
                # The context shows a turn with its relative dates made absolute.
                inside = any(texts[e][:60].lower() in block or shown[e][:60].lower() in block
                             for e in evidence)
                tiers = memory.context(f"question:{sample}", query=qa["question"], budget=1000,
                                       raw_turns=False).text.lower()
                for key in (str(category), "all", f"conv {sample}"):
                    for k in (5, 10, 25):
                        scores[f"{key}|{k}"].append(float(bool(evidence & set(hits[:k]))))
                    scores[f"{key}|vector10"].append(float(bool(evidence & set(plain))))
                    scores[f"{key}|context"].append(float(answer in block))
                    scores[f"{key}|inside"].append(float(inside))
                    scores[f"{key}|words"].append(
                        sum(w in block for w in words) / len(words) if words else 1.0)
                    scores[f"{key}|tiers"].append(
                        sum(w in tiers for w in words) / len(words) if words else 1.0)
            memory.close()
    return scores


def dia_ids(memory: Memory, conv: dict[str, Any]) -> dict[str, int]:
    """dia_id -> exchange id, by the importer's order (one row per turn, in order)."""
    by_session: dict[str, list[int]] = defaultdict(list)
    with memory.store.read() as conn:
        for exchange_id, session_id in conn.execute(
                "SELECT id, session_id FROM exchanges ORDER BY id"):
            by_session[session_id].append(exchange_id)
    ids = {}
    for key, turns in conv["conversation"].items():
        if key.startswith("session_") and key.count("_") == 1:
            sid = f"locomo:{conv['sample_id']}:{key.split('_')[1]}"
            for position, turn in enumerate(turns):
                ids[turn["dia_id"]] = by_session[sid][position]
    return ids


USAGE = ("usage: python -m bench.quality [--completer extractive|openai] [demo] "
         "[longmemeval PATH] [locomo PATH]")


def main() -> None:
    configure("warning")
    args = sys.argv[1:]
    backend_name = "extractive"
    if args[:1] == ["--completer"]:
        if len(args) < 2 or args[1] not in ("extractive", "openai"):
            sys.exit(USAGE)
        backend_name, args = args[1], args[2:]
    if not args:
        args = ["demo", "longmemeval", str(DATA / "longmemeval_s_dev.json"),
                "locomo", str(DATA / "locomo_dev.json")]
    targets: list[tuple[str, Path | None]] = []
    while args:
        name = args.pop(0)
        if name == "demo":
            targets.append((name, None))
        elif name in ("longmemeval", "locomo") and args:
            targets.append((name, Path(args.pop(0))))
        else:
            sys.exit(USAGE)
    missing = [str(path) for _, path in targets if path is not None and not path.is_file()]
    if missing:
        sys.exit(f"bench.quality: {missing[0]} not found; the dev slices live in "
                 "../shared/data beside the repository, or name the public files "
                 "(python -m bench.quality longmemeval FILE locomo FILE)")
    embedder = LocalEmbedder()
    backend = Backend(backend_name)
    try:
        for name, path in targets:
            if path is None:
                demo(embedder, backend)
            else:
                {"longmemeval": longmemeval, "locomo": locomo}[name](path, embedder, backend)
    finally:
        backend.stop()


if __name__ == "__main__":
    main()

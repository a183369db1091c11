"""Memory quality on public benchmarks and on the shipped sample, with the embedded default.

    python -m bench.quality [--completer extractive|openai] [demo] [longmemeval PATH]
        [locomo PATH] [facts PATH]

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
facts: every LoCoMo conversation in a file of its own, one full pass, its export scored
against the observations LoCoMo's annotators kept about each speaker. A fact matches an
observation when it came from one of the observation's evidence turns and their cosine
(the embedded MiniLM) is at least 0.5; a profile line is traced to its fact. Each
conversation is scored alone (nothing in dreamd is fitted to LoCoMo: the fact selector
learns from the project's own written examples), then all together; beside it, keeping
every turn verbatim as a fact. Also counted: words in the gists' About lines and the
reflection's topics that the conversation itself uses as interjections (a word that
opens a sentence and is followed at once by , ! or ., never written capitalized inside
one) or that come from the importer's image captions.
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

import numpy as np

from bench import fresh_set, reader
from dreamd.backends.local import LocalEmbedder
from dreamd.backends.openai_backend import OpenAICompleter
from dreamd.backends.protocols import Completer
from dreamd.cli.demo import parse_samples, sample_sessions
from dreamd.cli.demo import write_sessions as write_sample
from dreamd.config import CompleterConfig, Config, UserConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.ids import DEFAULT_USER, profile_id
from dreamd.memory.api import Memory
from dreamd.memory.export import export_user
from dreamd.memory.importers import parse_locomo, parse_longmemeval, write_sessions
from dreamd.runtime.log import configure
from dreamd.store.facts import facts_of
from dreamd.store.opening import open_store
from dreamd.store.sqlite import app_file
from dreamd.store.tiers import profile_row
from dreamd.store.turns import turns_by_id
from dreamd.text.keys import dated
from dreamd.text.speech import STOPWORDS
from testkit.openai_server import FakeOpenAI
from testkit.remembered import MATCH, SAM, from_file, judged

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
                 backend: Backend, sample: list[Any] | None = None, **changes: Any) -> Memory:
    """`sessions` imported into a new file at `db` (a sample written like a chat app when
    there are none: `sample`, or the shipped one), one full pass, and the memory to read
    it with."""
    config = backend.config(db, **changes)
    if not sessions:
        with app_file.created(db) as conn:
            write_sample(conn, sample or sample_sessions())
    store = open_store(config)
    write_sessions(store, sessions)
    run_pass(store, config, embedder, backend.completer(config, embedder), trigger="quality",
             force=True)
    store.close()
    return Memory(db, config=config, embedder=embedder)


def demo(embedder: LocalEmbedder, backend: Backend) -> None:
    """The shipped sample and the tests' second sample: the profile (and the current facts)
    against what a friend would keep (testkit/remembered.py)."""
    second = Path(__file__).parent.parent / "tests" / "data"
    for name, friends, sessions in (
            ("demo", SAM, None),
            ("second sample", from_file(second / "second_sample_keep.txt", "Jonah"),
             parse_samples((second / "second_sample.txt").read_text("utf-8")))):
        with tempfile.TemporaryDirectory() as tmp:
            memory = consolidated(Path(tmp) / "m.db", [], embedder, backend,
                                  user=UserConfig(name=friends.person), sample=sessions)
            with memory.store.read() as conn:
                profile = profile_row(conn, profile_id(DEFAULT_USER))
                facts = facts_of(conn, DEFAULT_USER, current_only=True)
            memory.close()
        print(judged(profile.content if profile else "", friends, embedder).line(
            f"{name} {backend.name} profile"))
        print(judged("\n".join(f"- {f.statement}" for f in facts), friends, embedder).line(
            f"{name} {backend.name} current facts"))


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
    in_tiers: dict[str, list[float]] = defaultdict(list)
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
            tiers = set(_WORDS.findall(memory.context(
                f"question:{question['question_id']}", query=question["question"], budget=1000,
                raw_turns=False).text.lower()))
            answer = set(_WORDS.findall(str(question["answer"]).lower())) - STOPWORDS
            for key in ("all", question["question_type"]):
                in_tiers[key].append(len(answer & tiers) / len(answer) if answer else 1.0)
            if question["question_type"] in ("knowledge-update", "single-session-user"):
                facts[question["question_type"]].append(in_facts(memory, question))
            memory.close()
    for kind, found in facts.items():
        n = len(found)
        print(f"longmemeval facts  {kind:<26} n={n:<3} answer in the current facts or profile "
              f"{100 * sum(now for now, _ in found) / n:5.1f}; answer only in a replaced fact "
              f"{100 * sum(old for _, old in found) / n:5.1f}")
    for key in sorted(in_tiers, key=lambda k: (k != "all", k)):
        n = len(in_tiers[key])
        print(f"longmemeval tiers  {key:<26} n={n:<3} answer words in the consolidated tiers "
              f"alone (1000-token context) {100 * sum(in_tiers[key]) / n:5.1f}")
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
                # Whole words: "art" is not in "start".
                in_block, in_tiers = set(_WORDS.findall(block)), set(_WORDS.findall(tiers))
                for key in (str(category), "all", f"conv {sample}"):
                    for k in (5, 10, 25):
                        scores[f"{key}|{k}"].append(float(bool(evidence & set(hits[:k]))))
                    scores[f"{key}|vector10"].append(float(bool(evidence & set(plain))))
                    scores[f"{key}|context"].append(float(answer in block))
                    scores[f"{key}|inside"].append(float(inside))
                    scores[f"{key}|words"].append(
                        len(words & in_block) / len(words) if words else 1.0)
                    scores[f"{key}|tiers"].append(
                        len(words & in_tiers) / len(words) if words else 1.0)
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


_CAPTION = frozenset({"shares", "image"})  # the importer's "[shares an image: ...]"


@dataclasses.dataclass
class Tally:
    """Matched and total counts of one measure, summed over conversations."""

    hit: int = 0
    n: int = 0

    def add(self, hits: list[bool]) -> None:
        self.hit += sum(hits)
        self.n += len(hits)

    def __str__(self) -> str:
        return f"{100 * self.hit / self.n if self.n else 0.0:5.1f} % (n={self.n})"


def matched(items: list[tuple[np.ndarray, set[int]]], gold: list[tuple[np.ndarray, set[int]]]
            ) -> tuple[list[bool], list[bool]]:
    """(each gold observation found, each item matching an observation): same turns,
    cosine at least MATCH."""
    found = [False] * len(gold)
    good = [False] * len(items)
    for i, (vector, turns) in enumerate(items):
        for j, (gold_vector, evidence) in enumerate(gold):
            if turns & evidence and float(vector @ gold_vector) >= MATCH:
                found[j] = good[i] = True
    return found, good


# Words of general English that tell when, and open a sentence with a comma after them
# as an interjection does ("Yesterday, I ...", "Recently, ..."): no interjection.
WHEN_WORDS = frozenset("""yesterday today tonight tomorrow recently lately earlier later now
    then afterwards eventually finally soon meanwhile""".split())


def interjections(texts: list[str]) -> set[str]:
    """Words a conversation uses as interjections: opening a sentence, followed at once by
    a comma, ! or ., and never written capitalized inside a sentence; not words that tell
    when (WHEN_WORDS)."""
    opening: set[str] = set()
    inside: set[str] = set()
    for text in texts:
        for m in re.finditer(r"(?:^|[.!?]\s+)([A-Z][a-z]+)(?=[,!.])", text):
            opening.add(m.group(1))
        for m in re.finditer(r"(?<=[a-z,;:]\s)([A-Z][a-z]+)", text):
            inside.add(m.group(1))
    return {w for w in opening - inside if w.lower() not in WHEN_WORDS}


def topic_words(export: dict[str, Any]) -> list[str]:
    """The words of every gist's About line and of the reflection's topics."""
    words = []
    for gist in export["gists"]:
        for line in gist["content"].splitlines():
            if line.startswith("About: "):
                words += [w.strip() for w in line[len("About: "):].split(",") if w.strip()]
    reflection = export.get("reflection") or {}
    words += [str(t) for t in (reflection.get("data") or {}).get("topics", [])]
    return words


def traced(profile: str, statements: dict[str, int]) -> list[tuple[str, int | None]]:
    """Each profile line with the fact it shows (by its statement), and whose it is (the
    person heading it, where the profile has several)."""
    out = []
    person = ""
    for line in profile.splitlines():
        if line.startswith("About "):
            person = line.removeprefix("About ").rstrip(":")
        if not line.lstrip().startswith("- "):
            continue
        body = re.sub(r" \(since [^)]*\)$", "", line.lstrip()[2:])
        out.append((person, statements.get(body)))
    return out


def facts(path: Path, embedder: LocalEmbedder, backend: Backend) -> None:
    """Facts and profile against LoCoMo's observations, each conversation alone."""
    facts_of_conversations(json.loads(path.read_text()), path.name, embedder, backend)


def facts_of_conversations(data: list[dict[str, Any]], label: str, embedder: LocalEmbedder,
                           backend: Backend) -> None:
    """Facts and profile against the annotators' observations, and the reader checks
    (bench/reader.py), each conversation in a file of its own."""
    totals: dict[str, Tally] = defaultdict(Tally)
    reading = reader.Totals()
    for conv in data:
        sample = conv["sample_id"]
        with tempfile.TemporaryDirectory() as tmp:
            memory = consolidated(Path(tmp) / "m.db", parse_locomo([conv], label), embedder,
                                  backend)
            ids = dia_ids(memory, conv)
            export = export_user(memory.store, DEFAULT_USER, memory.config.agent.id)
            with memory.store.read() as conn:
                turns = turns_by_id(conn, list(ids.values()))
            memory.close()
        gold_texts, gold_turns = [], []
        for session in conv["observation"].values():
            for said in session.values():
                for text, evidence in said:
                    evidence = [evidence] if isinstance(evidence, str) else evidence
                    where = {ids[e] for e in evidence if e in ids}
                    if where:  # a malformed evidence id names no turn: left out
                        gold_texts.append(text)
                        gold_turns.append(where)
        stored = export["facts"]
        people = [t for t in turns.values() if t.role.lower() != "assistant"]
        vectors = embedder.embed(gold_texts + [f["statement"] for f in stored]
                                 + [t.content for t in people])
        gold = list(zip(vectors[:len(gold_texts)], gold_turns, strict=True))
        fact_items = [(vectors[len(gold_texts) + i], set(f["from_turns"]))
                      for i, f in enumerate(stored)]
        turn_items = [(vectors[len(gold_texts) + len(stored) + i], {t.id})
                      for i, t in enumerate(people)]
        found, good = matched(fact_items, gold)
        every_found, every_good = matched(turn_items, gold)
        index = {f["statement"]: i for i, f in enumerate(stored)}
        lines = traced((export["profile"] or {}).get("content", ""), index)
        per_person: dict[str, int] = defaultdict(int)
        for heading, _ in lines:
            per_person[heading] += 1
        odd = interjections([t.content for t in turns.values()])
        words = topic_words(export)
        bad = [w for w in words if w in odd or w.lower() in _CAPTION]
        speakers = {conv["conversation"].get("speaker_a", ""),
                    conv["conversation"].get("speaker_b", "")}
        checks = reader.checked(export, turns.values(), speakers, odd, embedder)
        reading.add(checks)
        rows = {"recall": found, "precision": good,
                "profile": [i is not None and good[i] for _, i in lines],
                "every recall": every_found, "every precision": every_good,
                "topic words clean": [w not in bad for w in words]}
        for name, hits in rows.items():
            totals[name].add(hits)
        print(f"facts {sample:<8} recall {tally(found)}, precision {tally(good)}; profile "
              f"precision {tally(rows['profile'])}, lines per person {dict(per_person)}; "
              f"every turn: recall {tally(every_found)}, precision {tally(every_good)}; "
              f"interjections or caption words among About/topic words: {len(bad)} of "
              f"{len(words)} {sorted(set(bad))[:8]}")
        print(reader.detail(sample, checks))
    print(reading.line(label))
    print(f"facts {label:<8} recall {totals['recall']}, precision {totals['precision']}; "
          f"profile precision {totals['profile']}; every turn: recall "
          f"{totals['every recall']}, precision {totals['every precision']}; About/topic "
          f"words clean {totals['topic words clean']}")


def tally(hits: list[bool]) -> Tally:
    return Tally(sum(hits), len(hits))


USAGE = ("usage: python -m bench.quality [--completer extractive|openai] [demo] "
         "[longmemeval PATH] [locomo PATH] [facts PATH] [fresh [DIR]]")


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
                "locomo", str(DATA / "locomo_dev.json"), "facts", str(DATA / "locomo_dev.json"),
                "fresh"]
    targets: list[tuple[str, Path | None]] = []
    while args:
        name = args.pop(0)
        if name == "demo":
            targets.append((name, None))
        elif name == "fresh":
            folder = Path(args.pop(0)) if args and Path(args[0]).is_dir() else fresh_set.HERE
            targets.append((name, folder))
        elif name in ("longmemeval", "locomo", "facts") and args:
            targets.append((name, Path(args.pop(0))))
        else:
            sys.exit(USAGE)
    missing = [str(path) for name, path in targets
               if path is not None and name != "fresh" and not path.is_file()]
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
            elif name == "fresh":
                facts_of_conversations(fresh_set.load(path), "fresh", embedder, backend)
            else:
                run = {"longmemeval": longmemeval, "locomo": locomo, "facts": facts}[name]
                run(path, embedder, backend)
    finally:
        backend.stop()


if __name__ == "__main__":
    main()

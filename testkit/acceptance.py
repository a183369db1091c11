"""The guards judged on both answer corpora: what each check keeps of the good answers
(tests/data/answers_good.txt: what a capable model writes for dreamd's requests) and what
it refuses of the bad (tests/data/answers_bad.txt, what weak models return and hand-made
cases of each kind, and the cases made here from every text request).

Each check is judged alone: on every good answer it applies to (a facts answer's checks
apply to each of its facts), and on the bad answers made for it. `python -m bench.llm
acceptance` prints the table; tests/test_guards.py holds its rates.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from dreamd.backends.protocols import Embedder
from dreamd.backends.validate import CHECKS, FOR_JSON, Grounds, source_of
from dreamd.dream.jobs.facts_asked import ITEM_CHECKS, PER_TURN, fact_refusal
from dreamd.dream.jobs.reflect import validate as reflection
from dreamd.dream.jobs.topic import ON_TOPIC, chosen_floor, topic_score
from dreamd.errors import OutputInvalid
from dreamd.models import JSON_TASKS, Prompt
from testkit.requests import DATA, read_answers, requests

TEXT_CHECKS = (*CHECKS, "off-topic")
# Answers that say nothing about anything, as small models gave them.
ABOUT_NOTHING = (
    "You're ready to continue.", "I'll be happy to help you plan it.",
    "The user and the assistant had a conversation.",
    "Thank you for sharing. Let me know if you need anything else.",
)


@dataclass(frozen=True)
class Case:
    """One answer to one request; `check`: for a bad one, the check that must refuse it."""

    key: str
    prompt: Prompt
    answer: str
    check: str = ""


def good_cases() -> list[Case]:
    answers = read_answers(DATA / "answers_good.txt")
    asked = requests(answers)
    return [Case(key, asked[key], answer) for key, answer in answers.items()]


def bad_cases(good: list[Case]) -> list[Case]:
    """The bad corpus file's cases (its "## id | check" heads are not unique, so it is
    read in order), and cases made from every text request."""
    asked = requests(read_answers(DATA / "answers_good.txt"))
    out = [Case(key, asked[key], answer, check) for key, check, answer in bad_in_order()]
    rng = random.Random(57)
    texts = [c for c in good if c.prompt.task not in JSON_TASKS]
    for case in texts:
        p, lines = case.prompt, [ln for ln in case.prompt.items if len(ln) > 20]
        out.append(Case(case.key, p, p.system, "echo"))
        if len(lines) >= 3:
            out.append(Case(case.key, p, "\n".join(f"- {ln}" for ln in lines[:6]), "copy"))
        # The turns themselves, given back: a summary's material is turn lines.
        if p.task == "summarize" and (p.items[0][0].islower() or case.key.startswith("locomo/")):
            out.append(Case(case.key, p, "\n".join(p.items[:4]), "replay"))
        first = re.split(r"(?<=[.!?])\s", case.answer.strip())[0]
        out.append(Case(case.key, p, "\n".join([first] * 5), "loop"))
        out.append(Case(case.key, p, f"<|im_start|>assistant\n{case.answer}", "markers"))
        out.append(Case(case.key, p, rng.choice(ABOUT_NOTHING), "off-topic"))
        others = [c for c in texts if c.prompt.task == p.task and person(c) != person(case)]
        if others:
            out.append(Case(case.key, p, rng.choice(others).answer, "off-topic"))
    return out


def bad_in_order() -> Iterator[tuple[str, str, str]]:
    """The bad corpus file block by block (a request may have several bad answers)."""
    key: str | None = None
    lines: list[str] = []
    text = (DATA / "answers_bad.txt").read_text("utf-8").splitlines()
    for line in [*text, "## end | end"]:
        if line.startswith("## "):
            if key is not None:
                request, check = (p.strip() for p in key.split("|"))
                yield request, check, "\n".join(lines).strip("\n")
            key, lines = line[3:], []
        elif key is not None:
            lines.append(line)


def person(case: Case) -> str:
    """Whose life a request is about: the demo's sample and the LoCoMo fixture both tell
    of a Sam with a dog called Biscuit, so one's answers are no off-topic case for the
    other's requests."""
    return "jonah" if case.key.startswith("second/") else "sam"


def turn_ids(prompt: Prompt) -> set[int]:
    return {int(m) for m in re.findall(r"^\[(\d+)\]", prompt.user, re.MULTILINE)}


_SCORES: dict[tuple[str, str, tuple[str, ...]], float] = {}
_VECTORS: dict[tuple[str, str], np.ndarray] = {}


class EmbeddedOnce:
    """An embedder that embeds each distinct text once: the answers to one request share
    its material, which topic_score embeds with each of them. (The embedder's vector of a
    text does not depend on the texts beside it in a call.)"""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder, self.model = embedder, embedder.model

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if (self.model, t) not in _VECTORS]
        if new:
            _VECTORS.update(((self.model, t), v)
                            for t, v in zip(new, self.embedder.embed(new), strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([_VECTORS[(self.model, t)] for t in texts])


def scored(embedder: Embedder, answer: str, items: tuple[str, ...]) -> float:
    """topic_score, once per answer and material (the table and the floor's choice both
    need it)."""
    key = (embedder.model, answer, items)
    if key not in _SCORES:
        _SCORES[key] = topic_score(EmbeddedOnce(embedder), answer, items)
    return _SCORES[key]


def refused_by(check: str, case: Case, embedder: Embedder) -> list[bool]:
    """Whether `check` alone refuses the answer: one verdict, or one per fact."""
    text, p = case.answer.strip(), case.prompt
    if check == "off-topic":
        floor = ON_TOPIC.get(embedder.model)
        return [floor is not None and scored(embedder, text, p.items) < floor]
    if check in CHECKS and (p.task not in JSON_TASKS or check in FOR_JSON):
        return [CHECKS[check](text, p) is not None]
    if p.task == "reflect":
        try:
            reflection(text, source_of(p))
        except OutputInvalid as exc:
            return [("names what" in str(exc)) == (check == "grounded")]
        return [False]
    try:  # facts: the answer's shape, then each fact
        data = json.loads(text)
        items = data["facts"]
        assert isinstance(items, list) and len(items) <= PER_TURN * len(turn_ids(p))
    except (ValueError, KeyError, TypeError, AssertionError):
        return [check == "json"]
    if check == "json":
        return [False]
    grounds = Grounds.of(source_of(p))
    out = []
    for i, item in enumerate(items):
        found = fact_refusal(item, f"fact {i + 1}", turn_ids(p), set(), grounds)
        out.append(found is not None and found.check == check)
    return out


def checks_for(case: Case) -> tuple[str, ...]:
    if case.prompt.task == "facts":
        return (*FOR_JSON, "json", *ITEM_CHECKS)
    if case.prompt.task == "reflect":
        return (*FOR_JSON, "shape", "grounded")
    return TEXT_CHECKS


@dataclass
class Tally:
    kept: Counter[str] = field(default_factory=Counter)
    good: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    bad: Counter[str] = field(default_factory=Counter)
    misses: list[str] = field(default_factory=list)  # what a check got wrong


def acceptance(embedder: Embedder) -> tuple[Tally, Tally]:
    """(per check, per job): good answers (or facts) kept, bad ones refused."""
    checks, jobs = Tally(), Tally()
    good = good_cases()
    for case in good:
        verdicts = [refused_by(c, case, embedder) for c in checks_for(case)]
        for check, refused in zip(checks_for(case), verdicts, strict=True):
            checks.good[check] += len(refused)
            checks.kept[check] += refused.count(False)
            if any(refused):
                checks.misses.append(f"good {case.key} refused by {check}")
        per_item = [not any(v[i] if i < len(v) else v[0] for v in verdicts)
                    for i in range(max(len(v) for v in verdicts))]
        jobs.good[case.prompt.task] += len(per_item)
        jobs.kept[case.prompt.task] += sum(per_item)
    for case in bad_cases(good):
        refused = refused_by(case.check, case, embedder)
        checks.bad[case.check] += len(refused)
        checks.refused[case.check] += sum(refused)
        # A job refuses what any of its checks refuses.
        every = [refused_by(c, case, embedder) for c in checks_for(case)]
        jobs.bad[case.prompt.task] += len(refused)
        jobs.refused[case.prompt.task] += sum(
            any(v[i] if i < len(v) else v[0] for v in every) for i in range(len(refused)))
        if not all(refused):
            checks.misses.append(f"bad {case.key} ({case.check}) kept: {case.answer[:60]!r}")
    return checks, jobs


def table(tally: Tally) -> list[str]:
    """One line per check (or job): good kept and bad refused, counts and shares."""
    def share(n: int, of: int) -> str:
        return f"{n}/{of} ({100 * n / of:.1f} %)" if of else "-"
    names = list(dict.fromkeys([*tally.good, *tally.bad]))
    return [f"{name:<10} good kept {share(tally.kept[name], tally.good[name]):<18} "
            f"bad refused {share(tally.refused[name], tally.bad[name])}" for name in names]


@dataclass(frozen=True)
class Held:
    """The off-topic floor chosen on one person's requests, and what it does on the
    other's (which it was not chosen on)."""

    chosen_on: str
    floor: float
    kept: int
    good: int
    refused: int
    bad: int


def held_out(embedder: Embedder) -> list[Held]:
    """The floor `chosen_floor` picks on each person's text requests (their good answers
    against their off-topic bad ones), and its rates on the other person's."""
    good = good_cases()
    scores = [(person(c), True, scored(embedder, c.answer, c.prompt.items))
              for c in good if c.prompt.task not in JSON_TASKS]
    scores += [(person(c), False, scored(embedder, c.answer, c.prompt.items))
               for c in bad_cases(good) if c.check == "off-topic"]
    out = []
    for chosen_on in ("sam", "jonah"):
        floor = chosen_floor([s for p, g, s in scores if p == chosen_on and g],
                             [s for p, g, s in scores if p == chosen_on and not g])
        held_good = [s for p, g, s in scores if p != chosen_on and g]
        held_bad = [s for p, g, s in scores if p != chosen_on and not g]
        out.append(Held(chosen_on, floor, sum(s >= floor for s in held_good), len(held_good),
                        sum(s < floor for s in held_bad), len(held_bad)))
    return out


def requests_per_gist() -> tuple[tuple[int, int], int]:
    """A forced pass over the demo's sample conversations (all-MiniLM-L6-v2, the embedder
    whose off-topic floor is measured), each summarize request answered with the good
    corpus's gist of its session: (gists the model's, gists), summarize requests sent."""
    import sqlite3
    import tempfile
    from pathlib import Path

    from dreamd.backends.local import LocalEmbedder
    from dreamd.backends.openai_backend import OpenAICompleter
    from dreamd.cli.demo import sample_sessions, write_sessions
    from dreamd.config import AgentConfig, CompleterConfig, Config, FactsConfig, UserConfig
    from dreamd.dream.cycle import run_pass
    from dreamd.dream.prompts import summary_prompt
    from dreamd.store.opening import open_store
    from dreamd.store.sqlite.schema import CORE_TABLES
    from testkit.openai_server import FakeOpenAI
    from testkit.requests import chats, gist_of, said, said_at

    good = read_answers(DATA / "answers_good.txt")
    chat = chats()[0]
    corpus = {summary_prompt(chat.names, None, said(s), 8, said_at=said_at(s)).user:
              str(gist_of(s, good))
              for s in chat.sessions}
    server = FakeOpenAI(answers=corpus).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "m.db"
            conn = sqlite3.connect(db, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(CORE_TABLES)
            write_sessions(conn, sample_sessions())
            conn.close()
            config = Config(db=str(db), completer=CompleterConfig(
                backend="openai", base_url=server.base_url, model="capable",
                read_timeout_seconds=10), user=UserConfig(name="Sam"),
                agent=AgentConfig(name="Wren"), facts=FactsConfig(producer="offline"))
            store = open_store(config)
            with OpenAICompleter(config.completer, environ={"OPENAI_API_KEY": "k"}) as llm:
                run_pass(store, config, LocalEmbedder(), llm, trigger="bench", force=True)
            with store.read() as read:
                sources = [r[0] for r in read.execute("SELECT dreamd_source FROM summaries")]
            store.close()
    finally:
        server.stop()
    return (sum(s.startswith("llm:") for s in sources), len(sources)), \
        server.tasks().count("summarize")

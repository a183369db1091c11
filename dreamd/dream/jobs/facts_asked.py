"""The model's side of the facts job: the requests that draw facts from a batch of turns,
how an answer is checked, and the pool that sends a batch's requests at once.

A batch's requests (one user's turns, as many as fit each) show the same known facts and
do not depend on each other, so with several calls at once they all go out together; the
answers are written by the job, batch by batch in turn order (dreamd.dream.jobs.facts).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dreamd.backends import write_gate
from dreamd.backends.validate import Grounds, Refusal, source_of, ungrounded
from dreamd.dream.jobs.asking import Unusable
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.fitting import largest
from dreamd.dream.jobs.pool import HEARTBEAT_SECONDS, StopClock
from dreamd.dream.prompts import facts_prompt, facts_repair_prompt
from dreamd.errors import InputRejected, OutputInvalid
from dreamd.models import Fact, Prompt, Turn
from dreamd.text.dates import day_of, long_date
from dreamd.text.facts import Candidate

if TYPE_CHECKING:  # pydantic's models: loaded once an answer is checked
    from dreamd.dream.answers import FactItem

JOB = "facts"
NOT_PEOPLE = frozenset({"assistant", "system", "tool", "function", "developer"})
PER_TURN = 3  # facts an LLM may draw from one turn
KNOWN_SHOWN = 40  # current facts shown to the LLM, so it can say which a new one replaces


def speaker_name(ctx: JobContext, role: str, user_id: str) -> str | None:
    """Who said it, by name; None for the agent's own turns (not facts about a person)."""
    if role.lower() in NOT_PEOPLE:
        return None
    return ctx.names_for(user_id)["user"] if role == "user" else role


def word_mark(fact: Fact) -> str:
    """How a known fact a person stands behind is shown to the model: with the day of
    their word, which only a newer turn may outweigh."""
    if not fact.by_person:
        return ""
    day = day_of(fact.word_at or "")
    return f" [a person's word{f', {long_date(day)}' if day else ''}]"


def shown_to_model(current: list[Fact]) -> list[Fact]:
    """The known facts a prompt shows: every one a person stands behind, then the newest
    others, KNOWN_SHOWN in all (withdrawn facts are never among them)."""
    held = [f for f in current if f.by_person]
    others = [f for f in current if not f.by_person]
    room = max(0, KNOWN_SHOWN - len(held))
    return held + (others[-room:] if room else [])


def by_llm(ctx: JobContext) -> bool:
    """Whether this pass's facts come from the LLM: `facts.producer`, where "auto" means
    the LLM when the completer is one."""
    producer = ctx.config.facts.producer
    return ctx.asking.llm if producer == "auto" else producer == "llm" and ctx.asking.llm


def long_day(timestamp: str) -> str:
    day = day_of(timestamp)
    return f"{long_date(day)}. " if day else ""


# What each fact of an answer is checked for, beside the whole answer's shape ("json").
ITEM_CHECKS = ("shape", "turns", "grounded")


@dataclass(frozen=True)
class Sifted:
    """An answer's facts: those kept (candidate, its first turn, the known facts it
    replaces) and those dropped, each with its reason."""

    kept: list[tuple[Candidate, int, list[int]]]
    dropped: list[Refusal]


def fact_refusal(item: Any, where: str, turn_ids: set[int], known: set[int],
                 grounds: Grounds | None) -> Refusal | None:
    """Why one fact of an answer may not be kept, or None."""
    found = fact_of(item, where, turn_ids, known, grounds)
    return found if isinstance(found, Refusal) else None


def fact_of(item: Any, where: str, turn_ids: set[int], known: set[int],
            grounds: Grounds | None) -> FactItem | Refusal:
    """One fact of an answer as a FactItem, or why it may not be kept: its shape first
    (see FactItem), then whether the turns name what it does."""
    from dreamd.dream.answers import FactItem, checked, why_of

    fact = checked(FactItem, item, {"turn_ids": turn_ids, "known": known})
    if isinstance(fact, str):
        if not fact:
            return Refusal("shape", f"{where} is not an object")
        why = why_of(FactItem, fact)
        return Refusal(why.check, f"{where}: {why.text}")
    subject = fact.subject.strip()
    if grounds and subject.lower() not in grounds.lowered:
        return Refusal("grounded", f"{where} names what the turns do not: {subject}")
    made_up = ungrounded(f"{fact.subject}: {fact.statement}", grounds) if grounds else []
    if made_up:
        return Refusal("grounded",
                       f"{where} names what the turns do not: {', '.join(made_up[:4])}")
    return fact


def sifted(raw: str, turn_ids: set[int], known: set[int], source: str = "") -> Sifted:
    """An LLM's facts, each checked against its model (FactItem) and, given the prompt as
    `source`, grounded in it: the good ones kept, the others dropped with their reasons.
    One bad fact costs that fact, not the batch. An answer that is no list of facts, or
    whose every fact is dropped, is Unusable, naming the (first) problem."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise Unusable(f"not JSON ({exc})", "json") from None
    items = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise Unusable('expected an object {"facts": [...]}', "json")
    if len(items) > PER_TURN * max(1, len(turn_ids)):
        raise Unusable(f"{len(items)} facts from {len(turn_ids)} turns", "loop")
    grounds = Grounds.of(source) if source else None
    kept, dropped = [], []
    for i, item in enumerate(items):
        fact = fact_of(item, f"fact {i + 1}", turn_ids, known, grounds)
        if isinstance(fact, Refusal):
            dropped.append(fact)
            continue
        kept.append((Candidate(fact.subject.strip(), fact.statement.strip(), fact.about,
                               fact.valid_from, ""), min(fact.turns), fact.replaces))
    if dropped and not kept:
        first = dropped[0]
        more = f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else ""
        raise Unusable(first.why + more, first.check)
    return Sifted(kept, dropped)


def parsed(raw: str, turn_ids: set[int], known: set[int], source: str = ""
           ) -> list[tuple[Candidate, int, list[int]]]:
    """The facts of an answer that may be kept (see sifted)."""
    return sifted(raw, turn_ids, known, source).kept


@dataclass(frozen=True)
class Ask:
    """One facts request: some of one user's turns, with the facts shown beside them."""
    user: str
    lines: list[str]
    build: Callable[[list[str]], Prompt]
    said: dict[int, Turn]
    known: frozenset[int]


def asks_for(ctx: JobContext, rows: list[tuple[Turn, Turn | None, Turn | None]],
             owners: dict[str, str], shown: dict[str, list[Fact]]) -> list[Ask]:
    """The requests that draw facts from these turns, per user, each as large as fits;
    each prompt shows the user's facts in `shown`. They do not depend on each other."""
    out = []
    for user in sorted(set(owners.values())):
        said = {t.id: t for t, _, _ in rows if owners[t.session_id] == user
                and speaker_name(ctx, t.role, user) is not None}
        known = shown[user]
        listed = [f"#{f.id} {f.subject}{f' ({f.about})' if f.about else ''}: {f.statement}"
                  f"{word_mark(f)}" for f in known]
        lines = [f"[{t.id}] {long_day(t.created_at)}{speaker_name(ctx, t.role, user)}: "
                 f"{t.content}" for t in said.values()]
        build = functools.partial(facts_prompt, ctx.names_for(user), known=listed,
                                  per_turn=PER_TURN)
        at = 0
        while at < len(lines):
            n = largest(ctx, build, lines[at:], len(lines) - at)
            out.append(Ask(user, lines[at : at + n], build, said,
                           frozenset(f.id for f in known)))
            at += n
    return out


def ask(ctx: JobContext, request: Ask) -> list[tuple[str, int, Candidate, list[int]]]:
    """The facts the LLM draws in one request: its good facts kept, the others dropped
    (counted, with their reasons); an answer with none to keep is asked for once more,
    saying what was wrong, where that can mend it. A request the server refuses as too
    long (it counts tokens its own way) is asked in halves."""
    prompt = request.build(request.lines)
    part_ids = {int(ln[1 : ln.index("]")]) for ln in request.lines}
    source = source_of(prompt)

    def check(raw: str) -> Refusal | None:
        try:
            sifted(raw, part_ids, set(request.known), source)
        except Unusable as exc:
            return Refusal(exc.check, str(exc))
        return None

    try:
        raw = ctx.complete(prompt, check=check, again=lambda asked, why, _: facts_repair_prompt(
            asked, why.why)).text
    except InputRejected:
        if len(request.lines) == 1:
            raise
        half = len(request.lines) // 2
        return (ask(ctx, dataclasses.replace(request, lines=request.lines[:half]))
                + ask(ctx, dataclasses.replace(request, lines=request.lines[half:])))
    found = sifted(raw, part_ids, set(request.known), source)
    if found.dropped and ctx.asking.asks_model:
        for dropped in found.dropped:
            ctx.asking.answers.add(JOB, f"dropped:{dropped.check}")
        ctx.log.info("facts_dropped", job=JOB, kept=len(found.kept),
                     dropped=len(found.dropped), why=found.dropped[0].why[:200])
    said = request.said
    return [(request.user, turn_id, dataclasses.replace(
        candidate, said_at=said[turn_id].created_at,
        valid_from=candidate.valid_from or said[turn_id].created_at[:10]), replaces)
        for candidate, turn_id, replaces in found.kept]


Drawn = list[Any] | OutputInvalid | None


def asked(ctx: JobContext, request: Ask) -> Drawn:
    """What the LLM draws in one request, or, where its answers were rejected twice, why
    (unless jobs.fallback is off). Backend calls only: safe on a pool's thread."""
    try:
        return ask(ctx, request)
    except OutputInvalid as exc:
        if not ctx.asking.fallback:
            raise
        return exc


def combined(parts: list[Drawn]) -> Drawn:
    """A batch's draw from its requests' (in order): sentence by sentence if any says so,
    the fallback's reason if any request's answers were rejected, else every fact."""
    if any(p is None for p in parts):
        return None
    rejected = [p for p in parts if isinstance(p, OutputInvalid)]
    if rejected:
        return rejected[0]
    return [fact for p in parts if isinstance(p, list) for fact in p]


def produce(ctx: JobContext, pool: ThreadPoolExecutor | None, gate: write_gate.Gate | None,
            rows: list[tuple[Turn, Turn | None, Turn | None]], owners: dict[str, str],
            shown: dict[str, list[Fact]],
            passed_over: bool) -> list[Future[Drawn]]:
    """What the model draws from the batch, request by request: at once without a pool,
    else on the pool's threads (a passed-over batch has nothing; without the LLM, facts
    come sentence by sentence: None)."""
    if passed_over:
        return [resolved([])]
    if not by_llm(ctx):
        return [resolved(None)]
    try:
        asks = asks_for(ctx, rows, owners, shown)
        if pool is None or gate is None:
            drawn: list[Drawn] = []
            for a in asks:  # in turn, until one's answers are rejected
                drawn.append(asked(ctx, a))
                if isinstance(drawn[-1], OutputInvalid):
                    break
            return [resolved(combined(drawn))]
    except Exception as exc:  # the batch's failure, recorded when it is written
        return [resolved(None, exc)]
    return [pool.submit(gate.run, functools.partial(asked, ctx), a) for a in asks] or [
        resolved([])]


def resolved(value: Drawn, error: Exception | None = None) -> Future[Drawn]:
    """A future that already holds `value`, or raises `error`."""
    future: Future[Drawn] = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def answer_of(ctx: JobContext, futures: list[Future[Drawn]]) -> tuple[bool, Drawn]:
    """(True, what the model drew from the batch), waited for with the pass's stop checks
    between waits; (False, None) when a stop came and a call outlived the grace."""
    clock = StopClock(ctx)
    while not all(f.done() for f in futures):
        if clock.lapsed():
            return False, None
        with write_gate.waiting():
            wait(futures, timeout=HEARTBEAT_SECONDS)
    return True, combined([f.result() for f in futures])

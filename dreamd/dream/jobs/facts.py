"""facts: what people said about themselves and each other, as dated statements.

Turns are read in id order past the job's watermark, a batch at a time. Each person's
sentences that carry information become candidate facts (dreamd.text.facts); a
candidate that says again what a current fact says (by the embedder) adds its turn to
that fact's sources; one about a thing a person has one of at a time (a job, a home)
replaces the subject's current fact about it, which keeps its row with the day it
stopped. The chat app's turns are only read; writes are short and conditional on the
watermark.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from dreamd.backends import write_gate
from dreamd.config import Config
from dreamd.dream.jobs.base import JobContext, failed_items, note_failure, note_success
from dreamd.dream.jobs.embed import horizon
from dreamd.dream.jobs.facts_asked import (
    Drawn,
    answer_of,
    by_llm,
    produce,
    shown_to_model,
    speaker_name,
)
from dreamd.dream.selector import chosen, worth_a_run
from dreamd.dream.word import older_than_word, says
from dreamd.ids import user_keys
from dreamd.models import BacklogStats, Fact, JobResult, JobSpec, Turn
from dreamd.store.corrections import word_parts, word_seq, write_diary
from dreamd.store.facts import add_fact, add_sources, fact_vectors, facts_of, replace_fact
from dreamd.store.interface import Conn
from dreamd.store.pending import Moved, count_unread, mark_read, unread_turns
from dreamd.store.state import from_blob, to_blob
from dreamd.store.turns import session_owner
from dreamd.store.vectors import put_vector, with_neighbours
from dreamd.text.facts import CHANGE, Candidate, extracted
from dreamd.text.keys import addressee, space

JOB = "facts"
BATCH = 200  # turns per read and per write
SAME = 0.9  # cosine at which a candidate says what a known fact says
# Cosine from which a change ("switched to tea") is about a known fact ("drinks coffee
# every morning"): all-MiniLM-L6-v2 puts such pairs of one person at 0.53-0.80, and
# unrelated facts of that person at 0.31-0.44.
CHANGED = 0.5
SAID_AGAIN = 4096  # distinct statements whose vectors a run keeps (~1.5 KB each)


class Known:
    """A user's current facts and their vectors, as the batch sees and changes them: the
    vectors in one matrix (grown by doubling), so a candidate meets them all in one
    product. A batch's new facts are known by a stand-in id (negative) until its write
    gives them theirs (`settle`)."""

    def __init__(self, facts: list[Fact], vectors: dict[int, np.ndarray],
                 withdrawn: list[Fact] | None = None, word: int = 0) -> None:
        # A person's word as the batch read it: the facts they withdrew (with their
        # vectors, where stored), never made again from the turns they had, and the
        # number of their newest correction, which the batch's write checks.
        self.withdrawn = [(f, vectors.get(f.id)) for f in withdrawn or ()]
        self.word = word
        self.facts = [f for f in facts if f.id in vectors]
        self._row = {f.id: row for row, f in enumerate(self.facts)}
        self.unvectored = [f for f in facts if f.id not in vectors]
        dim = next(iter(vectors.values())).shape[0] if vectors else 0
        self._matrix = np.zeros((max(16, len(self.facts) * 2), dim), dtype=np.float32)
        for row, fact in enumerate(self.facts):
            self._matrix[row] = vectors[fact.id]
        self.live = np.ones(len(self.facts), dtype=bool)  # not replaced in this batch
        self._base = 0  # facts known before the batch `_batch` scored
        self._batch: np.ndarray | None = None

    def prepare(self, vectors: np.ndarray) -> None:
        """Score a batch's candidates against every fact known before it in one product
        (one pass over the facts for the batch, not one for each candidate)."""
        self._base = len(self.facts)
        self._batch = self._matrix[: self._base] @ np.asarray(vectors).T if self._base else None

    def _scores(self, vector: np.ndarray, i: int | None) -> np.ndarray:
        """Cosines of `vector` (the batch's candidate `i`) with every fact held."""
        n = len(self.facts)
        if i is None or self._batch is None or i >= self._batch.shape[1]:
            result: np.ndarray = self._matrix[:n] @ vector
            return result
        known = self._batch[:, i]
        if n == self._base:
            return known
        return np.concatenate([known, self._matrix[self._base:n] @ vector])

    def same(self, subject: str, vector: np.ndarray, i: int | None = None) -> Fact | None:
        """The current fact of `subject` that says what `vector` (the batch's candidate
        `i`, when prepared) says, if any."""
        if not self.facts:
            return None
        scores = self._scores(vector, i)
        close = [row for row in np.flatnonzero(scores >= SAME)
                 if self.live[row] and self.facts[row].subject == subject]
        return self.facts[max(close, key=lambda row: scores[row])] if close else None

    def nearest(self, subject: str, vector: np.ndarray) -> tuple[Fact | None, float]:
        """The current fact of `subject` closest to `vector`, and its cosine."""
        if not self.facts:
            return None, 0.0
        scores = self._matrix[: len(self.facts)] @ vector
        rows = [row for row in range(len(self.facts))
                if self.live[row] and self.facts[row].subject == subject]
        if not rows:
            return None, 0.0
        best = max(rows, key=lambda row: scores[row])
        return self.facts[best], float(scores[best])

    def refused(self, candidate: Candidate, turn_id: int, vector: np.ndarray) -> Fact | None:
        """The withdrawn fact `candidate` says again from a turn the person had when they
        withdrew it (its own turns, or an older one), if any: never made again."""
        for fact, known in self.withdrawn:
            if fact.subject != candidate.subject:
                continue
            if turn_id not in fact.sources and not older_than_word(candidate.said_at, fact):
                continue  # a newer turn: new evidence
            close = known is not None and float(known @ vector) >= SAME
            if close or says(candidate.statement, fact):
                return fact
        return None

    def about(self, subject: str, about: str) -> list[Fact]:
        return [f for row, f in enumerate(self.facts + self.unvectored)
                if (row >= len(self.facts) or self.live[row]) and f.subject == subject
                and f.about == about]

    def current(self) -> list[Fact]:
        return [f for row, f in enumerate(self.facts) if self.live[row]] + self.unvectored

    def replaced(self, old: Fact) -> None:
        row = self._row.get(old.id)
        if row is not None:
            self.live[row] = False
        else:
            self.unvectored.remove(old)

    def add(self, fact: Fact, vector: np.ndarray) -> None:
        if self._matrix.shape[1] == 0:
            self._matrix = np.zeros((16, vector.shape[0]), dtype=np.float32)
        if len(self.facts) == len(self._matrix):
            self._matrix = np.vstack([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[len(self.facts)] = vector
        self._row[fact.id] = len(self.facts)
        self.facts.append(fact)
        self.live = np.append(self.live, True)

    def settle(self, ids: dict[int, int]) -> None:
        """The batch's new facts, written: each under the id its row was given (`ids`, by
        stand-in, may hold other users' too)."""
        for stand_in, fact_id in ids.items():
            row = self._row.pop(stand_in, None)
            if row is None:
                continue
            self.facts[row] = dataclasses.replace(self.facts[row], id=fact_id)
            self._row[fact_id] = row


class Statements:
    """The vectors of one run's statements: each distinct statement is embedded once,
    whichever turn or batch says it again ("Sam: \"Thanks!\"", an assistant's stock
    reply), the last SAID_AGAIN of them kept."""

    def __init__(self, ctx: JobContext, size: int = SAID_AGAIN) -> None:
        self.ctx, self.size = ctx, size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()

    def vectors(self, statements: list[str]) -> np.ndarray:
        distinct = list(dict.fromkeys(statements))
        new = [s for s in distinct if s not in self._kept]
        found = dict(zip(new, self.ctx.embedder.embed(new), strict=True)) if new else {}
        for s in distinct:
            found[s] = self._kept[s] = found[s] if s in found else self._kept[s]
            self._kept.move_to_end(s)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return np.stack([found[s] for s in statements])


def candidates(ctx: JobContext, rows: list[tuple[Turn, Turn | None, Turn | None]],
               owners: dict[str, str]) -> list[tuple[str, int, Candidate]]:
    """(user, turn id, candidate) of every fact in these turns."""
    out = []
    for turn, before, after in rows:
        user = owners[turn.session_id]
        name = speaker_name(ctx, turn.role, user)
        if name is None:
            continue
        other = addressee(turn.role, before.role if before else None, after.role if after else None)
        if other is not None:
            other = speaker_name(ctx, other, user) or ctx.names_for(user)["agent"]
        out += [(user, turn.id, c) for c in extracted(
            name, turn.content, turn.created_at, other, before.content if before else "",
            replying=before is not None and before.role != turn.role)]
    return out


def read_through(unread: list[tuple[int, str, int]]) -> dict[str, tuple[int, int, int]]:
    """Each session's (mark found, last turn read, turns read) in one look at the batch."""
    marks: dict[str, tuple[int, int, int]] = {}
    for turn_id, session, mark in unread:
        found, last, count = marks.get(session, (mark, turn_id, 0))
        marks[session] = (found, max(last, turn_id), count + 1)
    return marks


def due_batches(parts: list[Batch], failures: dict[str, str | None],
                errors: list[str]) -> list[tuple[str, Batch]]:
    """The batches to send now, each with its item name, up to the first one backing off
    after a failure; a quarantined batch goes along (its turns are passed over)."""
    batches = []
    for part in parts:
        item = f"after:{part.rows[0][0].id - 1}"  # the batch after the turns before it
        if failures.get(item) == "quarantined":  # its record stays in status
            errors.append(f"{item}: quarantined; its {len(part.rows)} turns are "
                          "passed over")
        elif failures.get(item):  # backing off: not this pass
            errors.append(f"{item}: {failures[item]}")
            break
        batches.append((item, part))
    return batches


def run(ctx: JobContext, reason: str) -> JobResult:
    model = space(ctx.embedder.model)
    upto = horizon(ctx)
    done = failed = 0
    errors: list[str] = []
    failures = failed_items(ctx, JOB)
    # Each user's facts are read once per run and kept in step by `weighed` (only this job
    # writes facts; a forget meanwhile ends the run through `still_current`).
    state: dict[str, Known] = {}
    said = Statements(ctx)
    # With the LLM and several calls at once, the batches after the one being written are
    # already with the model (their prompts show the facts known when they were read;
    # `weighed` still merges what says the same as a fact found meanwhile).
    ahead = ctx.asking.calls_at_once if by_llm(ctx) and ctx.asking.calls_at_once > 1 else 1
    gate = ctx.threads.gate if ahead > 1 else None
    pool = (ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="dreamd-facts")
            if ahead > 1 else None)
    try:
        while not ctx.state.budget.exhausted() and not ctx.state.ending:
            with ctx.store.read() as conn:
                unread = unread_turns(conn, upto, BATCH * min(ahead, ctx.state.budget.room()),
                                      ctx.state.scope)
                rows = with_neighbours(conn, [i for i, _, _ in unread])
                owners = {t.session_id: session_owner(conn, t.session_id) for t, _, _ in rows}
                known = {user: facts_of(conn, user, current_only=True)
                         for user in set(owners.values()) - set(state)}
                words = {user: word_parts(conn, user) for user in known}
                blobs = fact_vectors(conn, model, [f.id for fs in known.values() for f in fs]
                                     + [f.id for w in words.values() for f in w[1]])
            if not rows:
                break
            state |= {user: Known(facts, {f.id: from_blob(blobs[f.id])
                                          for f in facts + words[user][1] if f.id in blobs},
                                  words[user][1], words[user][0])
                      for user, facts in known.items()}
            parts = in_batches(unread, rows)
            batches = due_batches(parts, failures, errors)
            if not batches:
                break
            shown = {user: shown_to_model(facts.current()) for user, facts in state.items()}
            answers = [produce(ctx, pool, gate, part.rows, owners, shown,
                               passed_over=failures.get(item) == "quarantined")
                       for item, part in batches]
            outcome = "next"
            for (item, part), answer in zip(batches, answers, strict=True):
                outcome = write_batch(ctx, gate, model, state, said, item, part, owners,
                                      answer, errors)
                if outcome == "failed":
                    failed += 1
                if outcome != "done":
                    break
                done += len(part.rows)
                if failures.get(item) != "quarantined":
                    note_success(ctx, JOB, item, failures)
                if ctx.state.budget.exhausted():
                    outcome = "spent"
                    break
            if outcome == "stopped":  # what is still out is never written
                ctx.state.abandon(sum(not f.done() and not f.cancel()
                                      for futures in answers for f in futures), ctx.log)
            if outcome == "moved":  # another worker read these turns: its facts stand
                state.clear()
                continue
            if outcome != "done" or len(batches) < len(parts):
                break
    finally:
        if pool is not None:
            with write_gate.waiting():
                pool.shutdown(wait=not ctx.state.abandoned, cancel_futures=True)
    with ctx.store.read() as conn:
        left = count_unread(conn, ctx.state.scope)
    return JobResult(JOB, True, reason, done=done, remaining=left, errors=tuple(errors),
                     failed=failed)


@dataclass(frozen=True)
class Batch:
    unread: list[tuple[int, str, int]]  # (turn, session, the session's mark before it)
    rows: list[tuple[Turn, Turn | None, Turn | None]]


def in_batches(unread: list[tuple[int, str, int]],
               rows: list[tuple[Turn, Turn | None, Turn | None]]) -> list[Batch]:
    """The turns read, BATCH at a time in id order; a session's mark before a batch is
    where the batch before it leaves it."""
    reached: dict[str, int] = {}
    out = []
    for at in range(0, len(unread), BATCH):
        part = [(turn, session, reached.get(session, mark))
                for turn, session, mark in unread[at : at + BATCH]]
        for turn, session, _ in part:
            reached[session] = turn
        ids = {turn for turn, _, _ in part}
        out.append(Batch(part, [r for r in rows if r[0].id in ids]))
    return out


def write_batch(ctx: JobContext, gate: write_gate.Gate | None, model: str,
                state: dict[str, Known], said: Statements, item: str, part: Batch,
                owners: dict[str, str], answer: list[Future[Drawn]], errors: list[str]) -> str:
    """The batch's facts and its sessions' read marks in one write: "done", "failed",
    "moved" (another worker read these turns), "stopped" or "stale"."""
    try:
        answered, drawn = answer_of(ctx, answer)
        if not answered:
            return "stopped"
        found, vectors, fell_back = batch_facts(ctx, said, part.rows, owners, drawn)
    except Exception as exc:  # a backend fault or junk twice: recorded, as for embed
        errors.append(note_failure(ctx, JOB, item, exc))
        return "failed"
    # Weighed before the write: the chat app waits while the lock is held.
    steps = weighed(state, found, vectors)
    users = sorted({owners[t.session_id] for t, _, _ in part.rows})
    try:
        with (gate.closed() if gate else contextlib.nullcontext()), \
                ctx.store.write(*user_keys(users)) as conn, (
                ctx.asking.falling_back(fell_back) if fell_back else contextlib.nullcontext()):
            if not ctx.state.still_current(conn):
                return "stale"
            if any(word_seq(conn, user) != state[user].word for user in users):
                raise Moved  # a person corrected a fact meanwhile: weighed again
            mark_read(conn, read_through(part.unread))
            ids = written(conn, ctx, model, steps)
    except Moved:
        return "moved"
    for user in {step.user for step in steps}:
        state[user].settle(ids)
    if fell_back:
        ctx.asking.note_fallback(JOB, item, fell_back)
    ctx.state.budget.spend()
    return "done"


def batch_facts(ctx: JobContext, said: Statements,
                rows: list[tuple[Turn, Turn | None, Turn | None]], owners: dict[str, str],
                drawn: Drawn
                ) -> tuple[list[Any], np.ndarray | None, str | None]:
    """The batch's facts and their vectors (on the pass thread, which owns the embedder):
    the model's, or sentence by sentence, with the reason where the model's were
    rejected (the fallback's)."""
    if isinstance(drawn, list):
        vectors = said.vectors([c.statement for _, _, c, _ in drawn]) if drawn else None
        return drawn, vectors, None
    found: list[Any] = [(user, turn, c, []) for user, turn, c in candidates(ctx, rows, owners)]
    looked = worth_a_run([c.statement for _, _, c, _ in found], ctx.embedder)
    found = [item for item, worth in zip(found, looked, strict=True) if worth]
    vectors = said.vectors([c.statement for _, _, c, _ in found]) if found else None
    if vectors is not None:
        found, vectors = worth_keeping(ctx, found, vectors)
    return found, vectors, None if drawn is None else str(drawn)


def worth_keeping(ctx: JobContext, found: list[Any], vectors: np.ndarray
                  ) -> tuple[list[Any], np.ndarray | None]:
    """The proposals the selector keeps (by words alone, without one for this embedder)."""
    keep = np.array(chosen([(c.subject, c.statement) for _, _, c, _ in found], vectors,
                           ctx.embedder.model), dtype=bool)
    kept = [item for item, k in zip(found, keep, strict=True) if k]
    return kept, (np.asarray(vectors)[keep] if kept else None)


@dataclass(frozen=True)
class Step:
    """What one candidate does to a user's facts, weighed before the write: gives its turn
    to the fact that says the same (`same`), or is a new fact (`new`, a stand-in id) that
    ends the facts `ends`. Ids below zero are the batch's new facts."""

    user: str
    turn_id: int
    candidate: Candidate
    vector: np.ndarray
    same: int | None = None
    new: int | None = None
    ends: tuple[int, ...] = ()
    refused: int | None = None  # a person's word on this fact keeps it from being made


def weighed(state: dict[str, Known], found: list[Any], vectors: np.ndarray | None
            ) -> list[Step]:
    """The batch's candidates met with each user's facts (and with each other, in order),
    outside any transaction: one product per user for the batch, then each in turn."""
    if vectors is None:
        return []
    for user in {u for u, _, _, _ in found}:
        state[user].prepare(vectors)
    steps: list[Step] = []
    for i, (user, turn_id, candidate, replaces) in enumerate(found):
        steps.append(weigh(state[user], user, turn_id, candidate, vectors[i], replaces, i,
                           stand_in=-(len(steps) + 1)))
    return steps


def weigh(known: Known, user: str, turn_id: int, candidate: Candidate, vector: np.ndarray,
          replaces: list[int] | None, i: int | None, stand_in: int) -> Step:
    """One candidate (the batch's `i`th) against the user's facts: a fact already known
    (its turn joins that fact's sources), or a new fact and the ones it replaces."""
    refused = known.refused(candidate, turn_id, vector)
    if refused is not None:
        return Step(user, turn_id, candidate, vector, refused=refused.id)
    same = known.same(candidate.subject, vector, i)
    if same is not None:
        return Step(user, turn_id, candidate, vector, same=same.id)
    wanted = set(replaces or ())
    named = [f for f in known.current() if f.id in wanted] if wanted else []
    by_about = known.about(candidate.subject, candidate.about) if candidate.about else []
    # A person's word is replaced only by a turn newer than it: what an older turn says
    # of the same thing is evidence they had, and gives way to it.
    held = [f for f in by_about if f.by_person and older_than_word(candidate.said_at, f)]
    if held:
        return Step(user, turn_id, candidate, vector, refused=held[0].id)
    named = [f for f in named if not (f.by_person and older_than_word(candidate.said_at, f))]
    changed = []
    subject_led = candidate.statement.startswith((f"{candidate.subject} ",
                                                  f"{candidate.subject}'s "))
    if subject_led and CHANGE.search(candidate.statement):  # the person's own change
        nearest, cosine = known.nearest(candidate.subject, vector)
        if nearest is not None and cosine >= CHANGED and not (
                nearest.by_person and older_than_word(candidate.said_at, nearest)):
            changed = [nearest]
    ended = list({f.id: f for f in named + by_about + changed}.values())
    for old in ended:
        known.replaced(old)
    known.add(Fact(stand_in, user, candidate.subject, candidate.about, candidate.statement,
                   candidate.valid_from, candidate.said_at, sources=(turn_id,)), vector)
    return Step(user, turn_id, candidate, vector, new=stand_in,
                ends=tuple(f.id for f in ended))


def written(conn: Conn, ctx: JobContext, model: str, steps: list[Step]) -> dict[int, int]:
    """Inside the batch's write: its steps as rows, nothing weighed. Returns each new
    fact's id by its stand-in."""
    ids: dict[int, int] = {}
    for step in steps:
        if step.refused is not None:
            note(conn, ctx, step.user, "honoured", {"fact": step.refused, "turn": step.turn_id})
            continue
        if step.same is not None:
            add_sources(conn, ids.get(step.same, step.same), [step.turn_id])
            continue
        c = step.candidate
        fact_id = add_fact(conn, step.user, c.subject, c.about, c.statement, c.valid_from,
                           c.said_at, [step.turn_id], ctx.asking.source)
        assert step.new is not None
        ids[step.new] = fact_id
        put_vector(conn, model, "fact", str(fact_id), to_blob(step.vector))
        note(conn, ctx, step.user, "fact_added", {"fact": fact_id, "turn": step.turn_id})
        for old in step.ends:
            replace_fact(conn, ids.get(old, old), fact_id, c.valid_from)
            note(conn, ctx, step.user, "fact_replaced", {"fact": ids.get(old, old),
                                                         "by": fact_id})
    return ids


def note(conn: Conn, ctx: JobContext, user: str, kind: str, detail: dict[str, Any]) -> None:
    """One line of the pass's diary, in the write that made the change."""
    write_diary(conn, ctx.state.run_id, user, JOB, kind, detail, ctx.now_text())


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return stats.turns_without_facts > 0, f"{stats.turns_without_facts} turns not read for facts"


SPEC = JobSpec(name=JOB, drive="continuity", work=work, run=run, model_key="facts_model",
               bounds={"facts": 8000}, needs=())


"""facts: what people said about themselves and each other, as dated statements.

Turns are read in id order past the job's watermark, a batch at a time. Each person's
sentences that carry information become candidate facts (dreamd.dream.facts); a
candidate that says again what a current fact says (by the embedder) adds its turn to
that fact's sources; one about a thing a person has one of at a time (a job, a home)
replaces the subject's current fact about it, which keeps its row with the day it
stopped. The chat app's turns are only read; writes are short and conditional on the
watermark.
"""

from __future__ import annotations

import numpy as np

from dreamd.config import Config
from dreamd.dream.facts import Candidate, extract
from dreamd.dream.jobs.base import JobContext, note_failure
from dreamd.dream.jobs.embed import horizon
from dreamd.dream.keys import addressee, space
from dreamd.models import BacklogStats, Fact, JobResult, JobSpec, Turn
from dreamd.store import queries as q
from dreamd.store.interface import Conn

JOB = "facts"
BATCH = 200  # turns per read and per write
SAME = 0.9  # cosine at which a candidate says what a known fact says
NOT_PEOPLE = frozenset({"assistant", "system", "tool", "function", "developer"})


class Known:
    """A user's current facts and their vectors, as the batch sees and changes them: the
    vectors in one matrix (grown by doubling), so a candidate meets them all in one
    product."""

    def __init__(self, facts: list[Fact], vectors: dict[int, np.ndarray]) -> None:
        self.facts = [f for f in facts if f.id in vectors]
        self.unvectored = [f for f in facts if f.id not in vectors]
        dim = next(iter(vectors.values())).shape[0] if vectors else 0
        self._matrix = np.zeros((max(16, len(self.facts) * 2), dim), dtype=np.float32)
        for row, fact in enumerate(self.facts):
            self._matrix[row] = vectors[fact.id]
        self.live = np.ones(len(self.facts), dtype=bool)  # not replaced in this batch

    def same(self, subject: str, vector: np.ndarray) -> Fact | None:
        """The current fact of `subject` that says what `vector` says, if any."""
        if not self.facts:
            return None
        scores = self._matrix[: len(self.facts)] @ vector
        for row in np.argsort(-scores)[:8]:
            if scores[row] < SAME:
                break
            if self.live[row] and self.facts[row].subject == subject:
                return self.facts[row]
        return None

    def about(self, subject: str, about: str) -> list[Fact]:
        return [f for row, f in enumerate(self.facts + self.unvectored)
                if (row >= len(self.facts) or self.live[row]) and f.subject == subject
                and f.about == about]

    def replaced(self, old: Fact) -> None:
        if old in self.facts:
            self.live[self.facts.index(old)] = False
        else:
            self.unvectored.remove(old)

    def add(self, fact: Fact, vector: np.ndarray) -> None:
        if self._matrix.shape[1] == 0:
            self._matrix = np.zeros((16, vector.shape[0]), dtype=np.float32)
        if len(self.facts) == len(self._matrix):
            self._matrix = np.vstack([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[len(self.facts)] = vector
        self.facts.append(fact)
        self.live = np.append(self.live, True)


def speaker_name(ctx: JobContext, role: str, user_id: str) -> str | None:
    """Who said it, by name; None for the agent's own turns (not facts about a person)."""
    if role.lower() in NOT_PEOPLE:
        return None
    return ctx.names_for(user_id)["user"] if role == "user" else role


def candidates(ctx: JobContext, rows: list[tuple[Turn, Turn | None, Turn | None]],
               owners: dict[str, str]) -> list[tuple[str, int, Candidate]]:
    """(user, turn id, candidate) of every fact in these turns."""
    out = []
    for turn, before, after in rows:
        user = owners[turn.session_id]
        name = speaker_name(ctx, turn.role, user)
        if name is None:
            continue
        other = addressee(turn.role, before.role if before else None,
                          after.role if after else None)
        if other is not None:
            other = speaker_name(ctx, other, user) or ctx.names_for(user)["agent"]
        out += [(user, turn.id, c) for c in extract(name, turn.content, turn.created_at, other)]
    return out


def run(ctx: JobContext, reason: str) -> JobResult:
    model = space(ctx.embedder.model)
    upto = horizon(ctx)
    done = added = 0
    errors: list[str] = []
    # Each user's facts are read once per run and kept in step by `learn` (only this job
    # writes facts; a forget meanwhile ends the run through `still_current`).
    state: dict[str, Known] = {}
    while not ctx.budget.exhausted() and not ctx.invalidated:
        with ctx.store.read() as conn:
            after = q.facts_watermark(conn)
            rows = q.with_neighbours(conn, q.ids_after(conn, after, BATCH, upto))
            owners = {t.session_id: q.session_owner(conn, t.session_id) for t, _, _ in rows}
            known = {user: q.facts_of(conn, user, current_only=True)
                     for user in set(owners.values()) - set(state)}
            blobs = q.fact_vectors(conn, model, [f.id for fs in known.values() for f in fs])
        if not rows:
            break
        found = candidates(ctx, rows, owners)
        try:
            vectors = ctx.embedder.embed([c.statement for _, _, c in found]) if found else None
        except Exception as exc:  # a backend fault: recorded; the next pass tries again
            errors.append(note_failure(ctx, JOB, f"after:{after}", exc))
            break
        state |= {user: Known(facts, {f.id: q.from_blob(blobs[f.id]) for f in facts
                                      if f.id in blobs}) for user, facts in known.items()}
        with ctx.store.write() as conn:
            if q.facts_watermark(conn) != after or not ctx.still_current(conn):
                break
            for i, (user, turn_id, candidate) in enumerate(found):
                assert vectors is not None
                added += learn(conn, ctx, model, state[user], user, turn_id, candidate,
                               vectors[i])
            q.set_facts_watermark(conn, rows[-1][0].id)
        done += len(rows)
        ctx.budget.spend()
    with ctx.store.read() as conn:
        left = q.count_exchanges_after(conn, q.facts_watermark(conn), upto)
    return JobResult(JOB, True, reason, done=done, remaining=left, errors=tuple(errors),
                     skipped=done - added if done else 0)


def learn(conn: Conn, ctx: JobContext, model: str, known: Known, user: str, turn_id: int,
          candidate: Candidate, vector: np.ndarray) -> int:
    """Inside the batch's write: one candidate into the user's facts. Returns 1 for a new
    fact, 0 for one already known (its turn joins the sources)."""
    same = known.same(candidate.subject, vector)
    if same is not None:
        q.add_sources(conn, same.id, [turn_id])
        return 0
    fact_id = q.add_fact(conn, user, candidate.subject, candidate.about, candidate.statement,
                         candidate.valid_from, candidate.said_at, [turn_id], ctx.source)
    q.put_vector(conn, model, "fact", str(fact_id), q.to_blob(vector))
    if candidate.about is not None:
        for old in known.about(candidate.subject, candidate.about):
            q.replace_fact(conn, old.id, fact_id, candidate.valid_from)
            known.replaced(old)
    known.add(Fact(fact_id, user, candidate.subject, candidate.about, candidate.statement,
                   candidate.valid_from, candidate.said_at, sources=(turn_id,)), vector)
    return 1


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return stats.turns_without_facts > 0, f"{stats.turns_without_facts} turns not read for facts"


SPEC = JobSpec(name=JOB, drive="continuity", work=work, run=run, model_key="", bounds={})


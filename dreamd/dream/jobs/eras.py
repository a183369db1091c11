"""eras: one digest per user and month, rebuilt only for months whose gists changed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dreamd.config import Config
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.fitting import answer
from dreamd.dream.jobs.pool import run_keyed
from dreamd.dream.jobs.profile import sureness_of, vectors_of
from dreamd.dream.prompts import era_prompt
from dreamd.dream.word import EMPTIED, Word, read_word, scrubbed
from dreamd.errors import OutputInvalid
from dreamd.ids import era_key
from dreamd.models import BacklogStats, Fact, Gist, JobResult, JobSpec
from dreamd.store import tiers
from dreamd.store.corrections import word_seq
from dreamd.store.facts import facts_of
from dreamd.store.interface import Conn
from dreamd.store.queues import tier_queue
from dreamd.store.runs import cached_output, save_output
from dreamd.store.state import Layout, core_embedding, read_layout, to_blob
from dreamd.store.tiers import era_seqs, gists_for_month, inputs_of, save_era
from dreamd.text.from_facts import era_from, when
from dreamd.text.keys import space

JOB = "eras"


def stale_months(ctx: JobContext) -> list[tuple[str, str]]:
    """(user, month) of every era whose month has a gist newer than it, or no era yet."""
    with ctx.store.read() as conn:
        return [(user, month) for user in tier_queue(conn, ctx.state.scope)
                for month in tiers.stale_months(conn, user)]


@dataclass(frozen=True)
class Work:
    user_id: str
    month: str
    gists: list[Gist]
    current_seq: int | None
    cached: tuple[str, str] | None
    facts: list[Fact]
    word: Word  # the person's word when the inputs were read: the write checks it
    sureness: dict[int, float] | None = None  # the month's facts: the selector's scores

    @property
    def key(self) -> str:
        return era_key(self.user_id, self.month)


class Eras:
    """Months whose era is stale: each user's month built and saved apart.
    A KeyedJob (see dreamd.dream.jobs.pool.run_keyed)."""

    name = JOB
    progress = False

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def todo(self, ctx: JobContext) -> list[tuple[str, str]]:
        return stale_months(ctx)

    def remaining(self, ctx: JobContext) -> int:
        return len(stale_months(ctx))

    def key(self, user_month: tuple[str, str]) -> str:
        return era_key(*user_month)

    def prepare(self, ctx: JobContext, user_month: tuple[str, str]) -> Work | None:
        user, month = user_month
        with ctx.store.read() as conn:
            gists = gists_for_month(conn, user, month)
            current = era_seqs(conn, user).get(month)
            cached = cached_output(conn, JOB, era_key(user, month))
            facts = facts_of(conn, user)
            word = read_word(conn, user, [f for f in facts if f.current])
            vectors = {} if ctx.asking.asks_model else vectors_of(
                ctx, conn, [f for f in facts if when(f)[:7] == month])
        return Work(user, month, gists, current, cached, facts, word,
                    sureness_of(ctx, vectors)) if gists else None

    def think(self, ctx: JobContext, work: Work) -> tuple[str, str, str, np.ndarray]:
        body = "" if ctx.asking.asks_model else era_from(
            work.facts, work.month, ctx.config.eras.lines, work.sureness)
        digest = raw = ""
        if not body:  # with an LLM, or a month without dated facts: from the gists
            lines = [ln for g in work.gists for ln in g.content.splitlines() if ln.strip()]
            names = ctx.names_for(work.user_id)
            completion, digest = answer(
                ctx, lines, None, lambda before, chunk: era_prompt(
                    names, work.month, chunk, ctx.config.eras.lines, before), work.cached)
            body, raw = completion.text.strip(), completion.text
        if body:  # nothing a person withdrew (a body that said nothing else says so)
            body = scrubbed(body, work.word) or EMPTIED
        if not body:
            raise OutputInvalid(f"empty digest for {work.month}")
        count = len(work.gists)
        content = f"{work.month}: {count} conversation{'' if count == 1 else 's'}.\n{body}"
        return content, digest, raw, ctx.embedder.embed([content])[0]

    def save(self, ctx: JobContext, conn: Conn, work: Work,
             result: tuple[str, str, str, np.ndarray]) -> bool:
        """Inside the caller's write transaction: the era, if its inputs are unchanged."""
        content, digest, raw, vector = result
        if word_seq(conn, work.user_id) != work.word.seq:
            return False  # a person corrected a fact meanwhile: built again, never over it
        stored = save_era(
            conn, month=work.month, user_id=work.user_id, content=content,
            session_count=len(work.gists), seq=max(max(g.seq for g in work.gists), work.word.seq),
            expected_seq=work.current_seq, source=ctx.asking.source, now=ctx.now_text(),
            embedding=core_embedding(self.layout.eras_embedding_required),
            vector=to_blob(vector), model=space(ctx.embedder.model), inputs=inputs_of(work.gists),
        )
        if stored and digest:
            save_output(conn, JOB, work.key, digest, raw)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_keyed(ctx, Eras(read_layout(ctx.store)), reason)


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return stats.stale_months > 0, f"{stats.stale_months} months with a stale era"


SPEC = JobSpec(name=JOB, drive="coherence", work=work, run=run, model_key="eras_model",
               bounds={'era': 3000}, needs=("facts", "summarize"))

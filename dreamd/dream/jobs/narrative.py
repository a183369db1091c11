"""narrative: each user's current arc, from their profile and most recent eras."""

from __future__ import annotations

from dataclasses import dataclass

from dreamd.config import Config
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.fitting import answer
from dreamd.dream.jobs.pool import run_keyed
from dreamd.dream.prompts import era_lines, narrative_prompt
from dreamd.dream.word import EMPTIED, Word, read_word, scrubbed
from dreamd.errors import OutputInvalid
from dreamd.ids import narrative_id, profile_id
from dreamd.models import BacklogStats, Fact, JobResult, JobSpec
from dreamd.store.corrections import word_seq
from dreamd.store.facts import facts_of
from dreamd.store.interface import Conn
from dreamd.store.queues import tier_queue
from dreamd.store.runs import cached_output, save_output
from dreamd.store.tiers import (
    Tier,
    eras_for_user,
    max_tier_seq,
    narrative_row,
    narrative_stale,
    profile_row,
    save_narrative,
    tier_inputs,
)
from dreamd.text.from_facts import narrative_from

JOB = "narrative"


def stale_users(ctx: JobContext) -> list[str]:
    """Users whose profile or eras moved past their narrative."""
    with ctx.store.read() as conn:
        return [u for u in tier_queue(conn, ctx.state.scope) if narrative_stale(conn, u)]


@dataclass(frozen=True)
class Work:
    user_id: str
    current: Tier | None
    inputs_seq: int
    profile: str | None
    eras: list[tuple[str, str]]
    inputs: dict[str, int]
    cached: tuple[str, str] | None
    facts: list[Fact]
    word: Word  # the person's word when the inputs were read: the write checks it

    @property
    def key(self) -> str:
        return narrative_id(self.user_id)


class Narratives:
    """Users whose narrative is older than its inputs: each built and saved apart.
    A KeyedJob (see dreamd.dream.jobs.pool.run_keyed)."""

    name = JOB
    progress = False

    def todo(self, ctx: JobContext) -> list[str]:
        return stale_users(ctx)

    def remaining(self, ctx: JobContext) -> int:
        return len(stale_users(ctx))

    def key(self, user: str) -> str:
        return narrative_id(user)

    def prepare(self, ctx: JobContext, user: str) -> Work | None:
        with ctx.store.read() as conn:
            profile = profile_row(conn, profile_id(user))
            eras = eras_for_user(conn, user)[-ctx.config.narrative.months :]
            inputs = tier_inputs(conn, "profile", "id = ?", (profile_id(user),))
            for month, _, _ in eras:
                for session, last_id in tier_inputs(
                        conn, "eras", "user_id = ? AND month = ?", (user, month)).items():
                    inputs[session] = max(inputs.get(session, 0), last_id)
            facts = facts_of(conn, user)
            work = Work(user, narrative_row(conn, narrative_id(user)),
                        max_tier_seq(conn, user, profile_id(user)),
                        profile.content if profile else None, [(m, c) for m, c, _ in eras], inputs,
                        cached_output(conn, JOB, narrative_id(user)), facts,
                        read_word(conn, user, [f for f in facts if f.current]))
        if work.inputs_seq == 0 or (work.current is not None
                                    and work.current.seq >= work.inputs_seq):
            return None
        return work

    def think(self, ctx: JobContext, work: Work) -> tuple[str, str, str]:
        since = f"{work.eras[0][0]}-01" if work.eras else ""
        body = "" if ctx.asking.asks_model else narrative_from(work.facts, since,
                                                       ctx.config.narrative.lines)
        digest = raw = ""
        if not body:  # with an LLM, or nothing dated changed: from the profile and eras
            names = ctx.names_for(work.user_id)
            completion, digest = answer(
                ctx, era_lines(work.eras), None, lambda before, chunk: narrative_prompt(
                    names, work.profile, [], ctx.config.narrative.lines, before, chunk),
                work.cached)
            body, raw = completion.text.strip(), completion.text
        if body:  # nothing a person withdrew (a body that said nothing else says so)
            body = scrubbed(body, work.word) or EMPTIED
        if not body:
            raise OutputInvalid("empty narrative")
        span = f"{work.eras[0][0]} to {work.eras[-1][0]}" if work.eras else "so far"
        return f"Recent arc ({span}):\n{body}", digest, raw

    def save(self, ctx: JobContext, conn: Conn, work: Work,
             result: tuple[str, str, str]) -> bool:
        content, digest, raw = result
        if word_seq(conn, work.user_id) != work.word.seq:
            return False  # a person corrected a fact meanwhile: built again, never over it
        stored = save_narrative(
            conn, narrative_id=work.key, user_id=work.user_id, content=content,
            seq=work.inputs_seq, expected_seq=work.current.seq if work.current else None,
            source=ctx.asking.source, now=ctx.now_text(), inputs=work.inputs,
        )
        if stored and digest:
            save_output(conn, JOB, work.key, digest, raw)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_keyed(ctx, Narratives(), reason)


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    if stats.narrative_stale:
        return True, "the profile or an era changed since the narrative"
    return False, "the narrative is current"


SPEC = JobSpec(name=JOB, drive="coherence", work=work, run=run, model_key="narrative_model",
               bounds={'narrative': 3000}, needs=("facts", "profile", "eras"))

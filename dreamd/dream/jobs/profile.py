"""profile: standing facts about each user.

Offline, it is the user's current facts grouped by topic (dreamd.text.facts); with an
LLM, the model folds the gists newer than the profile into it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dreamd.config import Config
from dreamd.dream import areas
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.fitting import answer
from dreamd.dream.jobs.pool import run_keyed
from dreamd.dream.prompts import profile_prompt
from dreamd.dream.selector import for_model
from dreamd.dream.word import Word, line_changes, masked, profile_kept, read_word
from dreamd.errors import OutputInvalid
from dreamd.ids import profile_id
from dreamd.models import BacklogStats, Completion, Fact, Gist, JobResult, JobSpec
from dreamd.store.corrections import word_seq, write_diary
from dreamd.store.facts import fact_vectors, facts_of
from dreamd.store.interface import Conn
from dreamd.store.queues import tier_queue
from dreamd.store.runs import cached_output, save_output
from dreamd.store.state import from_blob
from dreamd.store.tiers import (
    Tier,
    count_gists,
    gists_for_user,
    gists_past_profile,
    inputs_of,
    max_gist_seq,
    profile_row,
    save_profile,
    tier_inputs,
)
from dreamd.text.from_facts import profile_from
from dreamd.text.keys import space

JOB = "profile"
USER_ROLE = "user"


def stale_users(ctx: JobContext) -> list[str]:
    """Users with a gist newer than their profile (or no profile yet)."""
    with ctx.store.read() as conn:
        return [u for u in tier_queue(conn, ctx.state.scope) if gists_past_profile(conn, u)]


@dataclass(frozen=True)
class Work:
    user_id: str
    current: Tier | None
    previous_inputs: dict[str, int]
    new_gists: list[Gist]
    top_seq: int
    sessions: int
    cached: tuple[str, str] | None
    facts: list[Fact]
    sureness: dict[int, float] | None  # fact id -> the selector's score, where it has one
    vectors: dict[int, np.ndarray]  # fact id -> its stored vector (the embedder's)
    word: Word  # the person's word when the inputs were read: the write checks it

    @property
    def key(self) -> str:
        return profile_id(self.user_id)


def vectors_of(ctx: JobContext, conn: Conn, facts: list[Fact]) -> dict[int, np.ndarray]:
    """The facts' stored vectors (of this embedder's space), by fact id."""
    if not facts:
        return {}
    blobs = fact_vectors(conn, space(ctx.embedder.model), [f.id for f in facts])
    return {i: from_blob(blob) for i, blob in blobs.items()}


def sureness_of(ctx: JobContext, vectors: dict[int, np.ndarray]) -> dict[int, float] | None:
    """How sure the fact selector is that each fact is worth keeping, read off the facts'
    stored vectors; None without a selector for this embedder."""
    selector = for_model(ctx.embedder.model)
    if selector is None:
        return None
    if not vectors:
        return {}
    ids = list(vectors)
    scores = selector.scores(np.stack([vectors[i] for i in ids]))
    return {i: float(s) for i, s in zip(ids, scores, strict=True)}


def areas_of(ctx: JobContext, vectors: dict[int, np.ndarray]) -> dict[int, str] | None:
    """Each fact's area of a life by what it says, where the area model is sure of it;
    None without an area model for this embedder."""
    model = areas.for_model(ctx.embedder.model)
    return None if model is None else model.of(vectors)


def drafted(ctx: JobContext, work: Work) -> tuple[str, Completion, str]:
    if ctx.asking.asks_model and not work.new_gists:  # the person's word alone changed
        kept = work.current.content if work.current else ""
        return kept, Completion(kept, ctx.asking.source, "profile", extractive=True), ""
    content = "" if ctx.asking.asks_model else profile_from(
        work.facts, ctx.config.profile.max_facts,
        listeners=(ctx.names_for(work.user_id)["agent"],), sureness=work.sureness,
        # What says the same is judged on the scale of the selector's model only.
        vectors=work.vectors if work.sureness is not None else None,
        areas=areas_of(ctx, work.vectors))
    if content:
        return content, Completion(content, ctx.asking.source, "facts", extractive=True), ""
    lines = [ln for g in work.new_gists for ln in g.content.splitlines() if ln.strip()]
    names = ctx.names_for(work.user_id)
    previous = work.current.content if work.current else None
    completion, digest = answer(
        ctx, lines, previous, lambda before, chunk: profile_prompt(
            names, before, chunk, ctx.config.profile.max_facts, USER_ROLE), work.cached)
    content = completion.text.strip()
    if not content and not completion.extractive:
        raise OutputInvalid("empty profile")
    if not content:
        # Selection found no standing facts in these gists: the profile stands as it was,
        # and its watermark moves past them.
        content = previous or f"(no standing facts about {names['user']} stated yet)"
    return content, completion, digest


def noted(ctx: JobContext, conn: Conn, work: Work, content: str) -> None:
    """The pass's diary: the profile's lines added and dropped, and the corrections it
    now keeps."""
    before = work.current.content if work.current else ""
    added, dropped = line_changes(before, content)
    dropped = [masked(line, work.word) for line in dropped]  # no withdrawn words kept
    now, user = ctx.now_text(), work.user_id
    for kind, lines in (("profile_added", added), ("profile_dropped", dropped)):
        if lines:
            write_diary(conn, ctx.state.run_id, user, JOB, kind, {"lines": lines}, now)
    seen = work.current.seq if work.current else 0
    for c in work.word.corrections:
        if c.seq > seen:
            write_diary(conn, ctx.state.run_id, user, JOB, "honoured",
                        {"correction": c.id, "action": c.action, "fact": c.fact_id}, now)


class Profiles:
    """Users whose gists are newer than their profile: each profile built and saved apart.
    A KeyedJob (see dreamd.dream.jobs.pool.run_keyed)."""

    name = JOB
    progress = False

    def todo(self, ctx: JobContext) -> list[str]:
        return stale_users(ctx)

    def remaining(self, ctx: JobContext) -> int:
        return len(stale_users(ctx))

    def key(self, user: str) -> str:
        return profile_id(user)

    def prepare(self, ctx: JobContext, user: str) -> Work | None:
        key = profile_id(user)
        with ctx.store.read() as conn:
            current = profile_row(conn, key)
            seen = current.seq if current else 0
            new_gists = [g for g in gists_for_user(conn, user) if g.seq > seen]
            if not new_gists and word_seq(conn, user) <= seen:
                return None  # nothing new: no facts or vectors read
            facts = facts_of(conn, user, current_only=True)
            word = read_word(conn, user, facts)
            vectors = vectors_of(ctx, conn, facts)
            return Work(
                user_id=user, current=current,
                previous_inputs=tier_inputs(conn, "profile", "id = ?", (key,)) if current else {},
                new_gists=new_gists, top_seq=max(max_gist_seq(conn, user), word.seq),
                sessions=count_gists(conn, user), cached=cached_output(conn, JOB, key),
                facts=facts, sureness=sureness_of(ctx, vectors), vectors=vectors, word=word)

    def think(self, ctx: JobContext, work: Work) -> tuple[str, Completion, str]:
        """The profile as the person's word has it: nothing they withdrew, all they stand
        behind (a change of their word alone needs no model: the profile is kept to it)."""
        content, completion, digest = drafted(ctx, work)
        kept = profile_kept(content, work.word) or \
            f"(no standing facts about {ctx.names_for(work.user_id)['user']} stated yet)"
        if kept != content:
            completion = dataclasses.replace(completion, text=kept)
        return kept, completion, digest

    def save(self, ctx: JobContext, conn: Conn, work: Work,
             result: tuple[str, Completion, str]) -> bool:
        content, completion, digest = result
        if word_seq(conn, work.user_id) != work.word.seq:
            return False  # a person corrected a fact meanwhile: built again, never over it
        stored = save_profile(
            conn, profile_id=work.key, user_id=work.user_id, content=content,
            sessions_covered=work.sessions, seq=work.top_seq,
            expected_seq=work.current.seq if work.current else None, source=ctx.asking.source,
            now=ctx.now_text(), inputs=inputs_of(work.new_gists, work.previous_inputs),
        )
        if stored and digest:
            save_output(conn, JOB, work.key, digest, completion.text)
        if stored:
            noted(ctx, conn, work, content)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_keyed(ctx, Profiles(), reason)


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return stats.gists_newer_than_profile > 0, (
        f"{stats.gists_newer_than_profile} gists newer than the profile")


SPEC = JobSpec(name=JOB, drive="coherence", work=work, run=run, model_key="profile_model",
               bounds={'profile': 4000}, needs=("facts", "summarize"))

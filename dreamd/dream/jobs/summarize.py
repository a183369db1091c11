"""summarize: bring each session's gist up to its last turn, incrementally.

The previous gist plus only the new turns; a long first summary (or a long run of new
turns) is cut into chunks whose partial gists are merged — nothing is silently dropped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta

import numpy as np

from dreamd.config import Config
from dreamd.dream.gist import readable
from dreamd.dream.jobs.base import JobContext
from dreamd.dream.jobs.fitting import fold, largest
from dreamd.dream.jobs.pool import run_keyed
from dreamd.dream.prompts import merge_prompt, summary_prompt, turn_line
from dreamd.dream.sensing import is_idle
from dreamd.dream.word import EMPTIED, Word, read_word, scrubbed
from dreamd.errors import InputRejected, OutputInvalid
from dreamd.models import BacklogStats, JobResult, JobSpec, Prompt, Turn
from dreamd.store.corrections import word_seq, write_diary
from dreamd.store.interface import Conn
from dreamd.store.state import Layout, core_embedding, read_layout, to_blob
from dreamd.store.tiers import save_gist, summary_row
from dreamd.store.turns import DirtySession, dirty_sessions, session_turns
from dreamd.store.vectors import turn_vectors
from dreamd.text.keys import space

JOB = "summarize"
# The gist of a session whose every turn greeted, thanked or reacted: it says so, and
# holds none of their words.
CHIT_CHAT = "(greetings and small talk: nothing to keep)"


def candidates(ctx: JobContext) -> list[DirtySession]:
    """Dirty sessions; outside --force only the ripe ones whose chat has gone quiet."""
    with ctx.store.read() as conn:
        dirty = [s for s in dirty_sessions(conn) if ctx.state.holds(s.user_id)]
    if ctx.deps.force:
        return dirty
    after = ctx.config.summarize.after
    cutoff = ctx.now() - timedelta(minutes=ctx.config.summarize.idle_minutes)
    return [
        s for s in dirty
        if (s.summarized_id == 0 or s.unsummarized >= after) and is_idle(s.last_at, cutoff)
    ]


def validate(text: str) -> str:
    text = text.strip()
    if not text:
        raise OutputInvalid("empty gist")
    return text


def _first_turns(names: dict[str, str], previous: str | None, lines: int,
                 said_at: list[str], shown: list[str]) -> Prompt:
    """The request for the first of a session's turns (`shown`, said at `said_at`)."""
    return summary_prompt(names, previous, shown, lines, said_at=said_at[: len(shown)])


def gist_for(ctx: JobContext, user_id: str, previous: str | None, turns: list[Turn],
             vectors: dict[int, np.ndarray], chunk: int | None = None) -> str:
    """Prompts (pure) and backend calls; no transaction is open here."""
    names = ctx.names_for(user_id)
    lines = ctx.config.summarize.gist_lines
    chunk = chunk or ctx.config.summarize.chunk_turns

    def block_vectors(block: list[Turn]) -> np.ndarray | None:
        if all(t.id in vectors for t in block):
            return np.stack([vectors[t.id] for t in block])
        return None

    said = [turn_line(t.role, t.content) for t in turns]
    said_at = [t.created_at for t in turns]
    blocks: list[list[Turn]] = []
    while (at := sum(map(len, blocks))) < len(turns):  # at most `chunk` turns, and fitting
        n = largest(ctx, functools.partial(_first_turns, names, previous if not blocks
                                           else None, lines, said_at[at:]), said[at:], chunk)
        blocks.append(turns[at : at + n])
    if len(blocks) == 1:
        block = blocks[0]
        prompt = summary_prompt(names, previous, said[: len(block)], lines,
                                block_vectors(block), said_at[: len(block)])
        return validate(ctx.complete(prompt).text)
    partials = []
    for block in blocks:
        prompt = summary_prompt(names, None, [turn_line(t.role, t.content) for t in block],
                                lines, block_vectors(block), [t.created_at for t in block])
        partials.append(validate(ctx.complete(prompt).text))
    if previous:
        partials.insert(0, previous)
    merged, _ = fold(ctx, partials, None, lambda so_far, part: merge_prompt(
        names, [so_far, *part] if so_far else part, lines), lambda c: c.text)
    return validate(merged or "")


@dataclass(frozen=True)
class Work:
    session: DirtySession
    previous: str | None
    turns: list[Turn]
    vectors: dict[int, np.ndarray]
    word: Word  # the person's word when the inputs were read: the write checks it

    @property
    def key(self) -> str:
        return self.session.session_id

    @property
    def user_id(self) -> str:
        return self.session.user_id


class Summaries:
    """Sessions due a gist: each one's gist made and saved apart.
    A KeyedJob (see dreamd.dream.jobs.pool.run_keyed)."""

    name = JOB
    progress = True

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def todo(self, ctx: JobContext) -> list[DirtySession]:
        return candidates(ctx)

    def remaining(self, ctx: JobContext) -> int:
        return len(candidates(ctx))

    def key(self, session: DirtySession) -> str:
        return session.session_id

    def prepare(self, ctx: JobContext, session: DirtySession) -> Work:
        with ctx.store.read() as conn:
            existing = summary_row(conn, session.session_id)
            turns = session_turns(conn, session.session_id, session.summarized_id, session.last_id)
            vectors = turn_vectors(conn, space(ctx.embedder.model), [t.id for t in turns])
            word = read_word(conn, session.user_id)
        # A mark at the start with a gist stored: the gist is being made afresh (a fallback's
        # retry), from every turn and not from itself.
        previous = existing[0] if existing and session.summarized_id else None
        return Work(session, previous, turns, vectors, word)

    def think(self, ctx: JobContext, work: Work) -> tuple[str, bytes] | None:
        """The new gist and its vector. Input the backend rejects is split once, smaller."""
        if not work.turns:
            if not work.previous:
                return None
            gist = work.previous  # the new turns were deleted by the app: only the mark moves
        else:
            try:
                gist = gist_for(ctx, work.session.user_id, work.previous, work.turns, work.vectors)
            except InputRejected:
                size = max(2, min(len(work.turns), ctx.config.summarize.chunk_turns) // 2)
                gist = gist_for(ctx, work.session.user_id, work.previous, work.turns, work.vectors,
                                chunk=size)
        # What a reader stumbles on is cut, whoever wrote it (a model that copies a stage
        # direction or a greeting into a gist); a gist that was nothing else is no gist.
        gist = readable(gist)
        if not gist.strip() and ctx.asking.asks_model:
            raise OutputInvalid("the gist held only greetings, reactions or stage directions")
        gist = gist or CHIT_CHAT  # offline: a session that told nothing says so
        # Nothing a person withdrew: a gist made again from the same turns does not say it.
        gist = scrubbed(gist, work.word) or EMPTIED
        return gist, to_blob(ctx.embedder.embed([gist])[0])

    def save(self, ctx: JobContext, conn: Conn, work: Work,
             result: tuple[str, bytes]) -> bool:
        """Inside the caller's write transaction: the gist, if its inputs are unchanged."""
        gist, vector = result
        if word_seq(conn, work.user_id) != work.word.seq:
            return False  # a person corrected a fact meanwhile: made again, never over it
        stored = save_gist(
            conn,
            session=work.session,
            content=gist,
            last_exchange_id=work.session.last_id,
            turns_covered=work.session.summarized_turns + len(work.turns),
            source=ctx.asking.source,
            created_at=ctx.now_text(),
            embedding=core_embedding(self.layout.summaries_embedding_required),
            vector=vector,
            model=space(ctx.embedder.model),
        )
        if stored:
            write_diary(conn, ctx.state.run_id, work.user_id, JOB, "gist",
                        {"session": work.session.session_id}, ctx.now_text())
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_keyed(ctx, Summaries(read_layout(ctx.store)), reason)


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    """Idle ripe sessions (any dirty one under --force): an active chat is not summarized
    between its turns."""
    if force:
        return stats.dirty > 0, f"{stats.dirty} sessions with unsummarized turns"
    if stats.idle_ripe:
        return True, f"{stats.idle_ripe} idle ripe sessions ({stats.idle_ripe_turns} turns)"
    waiting = stats.ripe - stats.idle_ripe
    if waiting:
        return False, (f"{waiting} ripe sessions still active "
                       f"(idle_minutes={config.summarize.idle_minutes:g})")
    if stats.dirty:
        return False, f"{stats.dirty} sessions have fewer than {config.summarize.after} new turns"
    return False, "every session's gist is current"


SPEC = JobSpec(name=JOB, drive="continuity", work=work, run=run, model_key="summarize_model",
               bounds={'summarize': 4000, 'merge': 4000}, needs=("embed",))

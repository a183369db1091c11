"""summarize: bring each session's gist up to its last turn, incrementally.

The previous gist plus only the new turns; a long first summary (or a long run of new
turns) is cut into chunks whose partial gists are merged — nothing is silently dropped.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from dreamd.errors import OutputInvalid
from dreamd.jobs.base import JobContext, failed_items, note_failure, note_success
from dreamd.models import JobResult, Turn
from dreamd.prompts import merge_prompt, summary_prompt, turn_line
from dreamd.sensing import is_idle
from dreamd.store import queries as q

JOB = "summarize"


def candidates(ctx: JobContext) -> list[q.DirtySession]:
    """Dirty sessions; outside --force only the ripe ones whose chat has gone quiet."""
    with ctx.store.read() as conn:
        dirty = q.dirty_sessions(conn, ctx.config.user.id)
    if ctx.force:
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


def gist_for(ctx: JobContext, previous: str | None, turns: list[Turn],
             vectors: dict[int, np.ndarray]) -> str:
    """Pure selection of prompts plus backend calls; no transaction is open here."""
    lines = ctx.config.summarize.gist_lines
    chunk = ctx.config.summarize.chunk_turns

    def block_vectors(block: list[Turn]) -> np.ndarray | None:
        if all(t.id in vectors for t in block):
            return np.stack([vectors[t.id] for t in block])
        return None

    blocks = [turns[i : i + chunk] for i in range(0, len(turns), chunk)]
    if len(blocks) == 1:
        block = blocks[0]
        prompt = summary_prompt(ctx.names, previous, [turn_line(t.role, t.content) for t in block],
                                lines, block_vectors(block))
        return validate(ctx.complete(prompt).text)
    partials = []
    for block in blocks:
        prompt = summary_prompt(ctx.names, None, [turn_line(t.role, t.content) for t in block],
                                lines, block_vectors(block))
        partials.append(validate(ctx.complete(prompt).text))
    if previous:
        partials.insert(0, previous)
    return validate(ctx.complete(merge_prompt(ctx.names, partials, lines)).text)


def summarize_session(ctx: JobContext, session: q.DirtySession, layout: q.Layout) -> bool:
    with ctx.store.read() as conn:
        existing = q.summary_row(conn, session.session_id)
        turns = q.session_turns(conn, session.session_id, session.summarized_id, session.last_id)
        vectors = q.turn_vectors(conn, ctx.embedder.model, [t.id for t in turns])
    previous = existing[0] if existing else None
    if turns:
        gist = gist_for(ctx, previous, turns, vectors)
    elif previous:
        gist = previous  # the new turns were deleted by the app: only the watermark moves
    else:
        return False
    vector = ctx.embedder.embed([gist])[0]
    with ctx.store.write() as conn:
        return q.save_gist(
            conn,
            session=session,
            content=gist,
            last_exchange_id=session.last_id,
            turns_covered=session.summarized_turns + len(turns),
            source=ctx.source,
            created_at=ctx.now_text(),
            embedding=q.core_embedding(layout.summaries_embedding_required),
            vector=q.to_blob(vector),
            model=ctx.embedder.model,
        )


def run(ctx: JobContext, reason: str) -> JobResult:
    todo = candidates(ctx)
    failures = failed_items(ctx, JOB)
    layout = q.read_layout(ctx.store)
    done = failed = skipped = 0
    errors: list[str] = []
    for index, session in enumerate(todo):
        if ctx.budget.exhausted():
            break
        if failures.get(session.session_id):
            skipped += 1
            continue
        try:
            stored = summarize_session(ctx, session, layout)
        except Exception as exc:  # one bad session must not stop the pass
            errors.append(note_failure(ctx, JOB, session.session_id, exc))
            failed += 1
            continue
        if stored:
            done += 1
            ctx.budget.spend()
            note_success(ctx, JOB, session.session_id, failures)
        else:
            skipped += 1  # its inputs changed meanwhile: redone on a later pass
        ctx.progress(JOB, index + 1, len(todo))
    remaining = len(candidates(ctx))
    return JobResult(JOB, True, reason, done=done, failed=failed, skipped=skipped,
                     remaining=remaining, errors=tuple(errors))

"""narrative: the current arc, from the profile and the most recent eras."""

from __future__ import annotations

from dreamd.errors import OutputInvalid
from dreamd.ids import narrative_id, profile_id
from dreamd.jobs.base import JobContext, complete_once, run_single
from dreamd.models import JobResult
from dreamd.prompts import narrative_prompt
from dreamd.store import queries as q

JOB = "narrative"


def rebuild(ctx: JobContext) -> bool:
    user = ctx.config.user.id
    key = narrative_id(user)
    with ctx.store.read() as conn:
        cached = q.cached_output(conn, JOB, key)
        current = q.narrative_row(conn, key)
        inputs_seq = q.max_tier_seq(conn, user, profile_id(user))
        profile = q.profile_row(conn, profile_id(user))
        eras = q.eras_for_user(conn, user)[-ctx.config.narrative.months :]
    if inputs_seq == 0 or (current is not None and current.seq >= inputs_seq):
        return False
    prompt = narrative_prompt(ctx.names, profile.content if profile else None,
                              [(m, c) for m, c, _ in eras], ctx.config.narrative.lines)
    completion, digest = complete_once(ctx, prompt, cached)
    body = completion.text.strip()
    if not body:
        raise OutputInvalid("empty narrative")
    span = f"{eras[0][0]} to {eras[-1][0]}" if eras else "so far"
    content = f"Recent arc ({span}):\n{body}"
    with ctx.store.write() as conn:
        stored = q.save_narrative(
            conn, narrative_id=key, user_id=user, content=content, seq=inputs_seq,
            expected_seq=current.seq if current else None, source=ctx.source,
            now=ctx.now_text(),
        )
        if stored:
            q.save_output(conn, JOB, key, digest, completion.text)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_single(ctx, JOB, narrative_id(ctx.config.user.id), reason, lambda: rebuild(ctx))

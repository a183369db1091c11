"""profile: standing facts about the user, folded in from gists newer than the profile."""

from __future__ import annotations

from dreamd.errors import OutputInvalid
from dreamd.ids import profile_id
from dreamd.jobs.base import JobContext, complete_once, run_single
from dreamd.models import JobResult
from dreamd.prompts import profile_prompt
from dreamd.store import queries as q

JOB = "profile"
USER_ROLE = "user"


def rebuild(ctx: JobContext) -> bool:
    user = ctx.config.user.id
    key = profile_id(user)
    with ctx.store.read() as conn:
        cached = q.cached_output(conn, JOB, key)
        current = q.profile_row(conn, key)
        seen = current.seq if current else 0
        new_gists = [g for g in q.gists_for_user(conn, user) if g.seq > seen]
        top_seq = q.max_gist_seq(conn, user)
        sessions = q.count_gists(conn, user)
    if not new_gists:
        return False
    lines = [ln for g in new_gists for ln in g.content.splitlines() if ln.strip()]
    prompt = profile_prompt(ctx.names, current.content if current else None, lines,
                            ctx.config.profile.max_facts, USER_ROLE)
    completion, digest = complete_once(ctx, prompt, cached)
    content = completion.text.strip()
    if not content and not completion.extractive:
        raise OutputInvalid("empty profile")
    if not content:
        # Selection found no standing facts in these gists: the profile stands as it was,
        # and its watermark moves past them.
        content = current.content if current else (
            f"(no standing facts about {ctx.config.user.name} stated yet)")
    with ctx.store.write() as conn:
        stored = q.save_profile(
            conn, profile_id=key, user_id=user, content=content, sessions_covered=sessions,
            seq=top_seq, expected_seq=current.seq if current else None,
            source=ctx.source, now=ctx.now_text(),
        )
        if stored:
            q.save_output(conn, JOB, key, digest, completion.text)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_single(ctx, JOB, profile_id(ctx.config.user.id), reason, lambda: rebuild(ctx))

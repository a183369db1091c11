"""eras: one digest per month, rebuilt only for months whose gists changed."""

from __future__ import annotations

from dreamd.errors import OutputInvalid
from dreamd.jobs.base import JobContext, failed_items, note_failure, note_success
from dreamd.models import JobResult
from dreamd.prompts import era_prompt
from dreamd.store import queries as q

JOB = "eras"


def stale_months(ctx: JobContext) -> list[str]:
    with ctx.store.read() as conn:
        return q.stale_months(conn, ctx.config.user.id)


def rebuild_month(ctx: JobContext, month: str, layout: q.Layout) -> bool:
    user = ctx.config.user.id
    with ctx.store.read() as conn:
        gists = q.gists_for_month(conn, user, month)
        current = q.era_seqs(conn, user).get(month)
    if not gists:
        return False
    lines = [ln for g in gists for ln in g.content.splitlines() if ln.strip()]
    body = ctx.complete(era_prompt(ctx.names, month, lines, ctx.config.eras.lines)).text.strip()
    if not body:
        raise OutputInvalid(f"empty digest for {month}")
    content = f"{month}: {len(gists)} conversations.\n{body}"
    vector = ctx.embedder.embed([content])[0]
    with ctx.store.write() as conn:
        return q.save_era(
            conn, month=month, user_id=user, content=content, session_count=len(gists),
            seq=max(g.seq for g in gists), expected_seq=current,
            source=ctx.source, now=ctx.now_text(),
            embedding=q.core_embedding(layout.eras_embedding_required),
            vector=q.to_blob(vector), model=ctx.embedder.model,
        )


def run(ctx: JobContext, reason: str) -> JobResult:
    months = stale_months(ctx)
    failures = failed_items(ctx, JOB)
    layout = q.read_layout(ctx.store)
    done = failed = skipped = 0
    errors: list[str] = []
    for month in months:
        if ctx.budget.exhausted():
            break
        if failures.get(month):
            skipped += 1
            continue
        try:
            stored = rebuild_month(ctx, month, layout)
        except Exception as exc:  # one bad month must not stop the others
            errors.append(note_failure(ctx, JOB, month, exc))
            failed += 1
            continue
        note_success(ctx, JOB, month, failures)
        done += int(stored)
        skipped += int(not stored)
        ctx.budget.spend()
    return JobResult(JOB, True, reason, done=done, failed=failed, skipped=skipped,
                     remaining=len(stale_months(ctx)), errors=tuple(errors))

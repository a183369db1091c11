"""eras: one digest per month, rebuilt only for months whose gists changed."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from dreamd.errors import OutputInvalid
from dreamd.jobs.base import JobContext, complete_once, failed_items, note_failure
from dreamd.jobs.pool import run_items
from dreamd.models import Gist, JobResult
from dreamd.prompts import era_prompt
from dreamd.store import queries as q

JOB = "eras"


def stale_months(ctx: JobContext) -> list[str]:
    with ctx.store.read() as conn:
        return q.stale_months(conn, ctx.config.user.id)


@dataclass(frozen=True)
class Work:
    month: str
    gists: list[Gist]
    current_seq: int | None
    cached: tuple[str, str] | None


def prepare(ctx: JobContext, month: str) -> Work | None:
    user = ctx.config.user.id
    with ctx.store.read() as conn:
        gists = q.gists_for_month(conn, user, month)
        current = q.era_seqs(conn, user).get(month)
        cached = q.cached_output(conn, JOB, month)
    return Work(month, gists, current, cached) if gists else None


def think(ctx: JobContext, work: Work) -> tuple[str, str, str, np.ndarray]:
    lines = [ln for g in work.gists for ln in g.content.splitlines() if ln.strip()]
    prompt = era_prompt(ctx.names, work.month, lines, ctx.config.eras.lines)
    completion, digest = complete_once(ctx, prompt, work.cached)
    body = completion.text.strip()
    if not body:
        raise OutputInvalid(f"empty digest for {work.month}")
    content = f"{work.month}: {len(work.gists)} conversations.\n{body}"
    return content, digest, completion.text, ctx.embedder.embed([content])[0]


def save(ctx: JobContext, conn: sqlite3.Connection, work: Work,
         result: tuple[str, str, str, np.ndarray], layout: q.Layout) -> bool:
    """Inside the caller's write transaction: the era, if its inputs are unchanged."""
    content, digest, raw, vector = result
    stored = q.save_era(
        conn, month=work.month, user_id=ctx.config.user.id, content=content,
        session_count=len(work.gists), seq=max(g.seq for g in work.gists),
        expected_seq=work.current_seq, source=ctx.source, now=ctx.now_text(),
        embedding=q.core_embedding(layout.eras_embedding_required),
        vector=q.to_blob(vector), model=ctx.embedder.model,
    )
    if stored:
        q.save_output(conn, JOB, work.month, digest, raw)
    return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    months = stale_months(ctx)
    failures = failed_items(ctx, JOB)
    layout = q.read_layout(ctx.store)

    def save_one(conn: sqlite3.Connection, work: Work,
                 result: tuple[str, str, str, np.ndarray]) -> bool:
        if work.month in failures:
            q.clear_failure(conn, JOB, work.month)
        return save(ctx, conn, work, result, layout)

    tally = run_items(
        ctx,
        (m for m in months if not failures.get(m)),
        prepare=lambda month: prepare(ctx, month),
        think=lambda work: think(ctx, work),
        save=save_one,
        on_error=lambda month, exc: note_failure(ctx, JOB, month, exc),
    )
    blocked = sum(1 for m in months if failures.get(m))
    return JobResult(JOB, True, reason, done=tally.done, failed=tally.failed,
                     skipped=tally.skipped + blocked, remaining=len(stale_months(ctx)),
                     errors=tuple(tally.errors))

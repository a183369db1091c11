"""embed: give every new turn a vector of dreamd's model, in batches, in id order, and
its words to the full-text index — both by the turn's key (dreamd.text.keys)."""

from __future__ import annotations

from dreamd.config import Config
from dreamd.dream.jobs.base import JobContext, failed_items, note_failure, note_success
from dreamd.ids import user_keys
from dreamd.models import BacklogStats, JobResult, JobSpec, Turn
from dreamd.store.pending import (
    count_unembedded,
    indexed,
    settle_words_watermark,
    unembedded_ids,
    unindexed_ids,
)
from dreamd.store.state import to_blob
from dreamd.store.turns import max_exchange_id
from dreamd.store.vectors import (
    derived_without_vector,
    embed_watermark,
    fts_redo,
    fts_watermark,
    index_texts,
    save_derived_vectors,
    save_turn_vectors,
    with_neighbours,
)
from dreamd.text.keys import (
    Said,
    addressee,
    context_text,
    rewriting_once,
    space,
    vector_key,
)

JOB = "embed"
# The lock of the list of turns to index again (after a forget): its writes read and
# change the list.
WORDS_REDO = "words-redo"
# Turns per full-text transaction: about 1 ms of write lock on a slow 2-core box. The chat
# app that finds the lock taken sleeps in its busy handler (SQLite's: 1, 2, 5, 10 ms
# between tries), so a write of 2 ms or less costs it at most 3 ms; 500 turns a
# transaction held the lock 4-9 ms there, and the app's INSERT slept 8 ms or more.
INDEX_CHUNK = 128
INDEX_CHARS = 100_000  # and at most this much text (chat turns of 20-50 words: ~80,000)
# Steps of merging the index's parts after each chunk and after the last, while there is
# any to do (see Store.tidy_words), at most this many: 16 pages each keep up with chunks
# of long turns too (200 words a turn fell behind at 4 steps).
TIDY_STEPS = 32


def run(ctx: JobContext, reason: str) -> JobResult:
    with rewriting_once():  # a turn's words rewritten once for all its keys
        return embed_turns(ctx, reason)


def embed_turns(ctx: JobContext, reason: str) -> JobResult:
    model = space(ctx.embedder.model)
    batch = ctx.config.embed.batch_size
    done = failed = 0
    errors: list[str] = []
    failures = failed_items(ctx, JOB)
    upto = horizon(ctx)
    while not ctx.state.budget.exhausted() and not ctx.state.ending:
        with ctx.store.read() as conn:
            watermark = embed_watermark(conn, model)
            ids = unembedded_ids(conn, model, watermark, upto, batch, ctx.state.scope)
            turns = with_neighbours(conn, ids)
            remaining = count_unembedded(conn, model, watermark, upto, ctx.state.scope)
        if not turns:
            break
        item = f"after:{turns[0][0].id - 1}"  # the batch after the turns done before it
        if failures.get(item):
            errors.append(f"{item}: {failures[item]}")
            break
        try:
            vectors = ctx.embedder.embed([vector_key(said(*t)) for t in turns])
            if vectors.shape != (len(turns), ctx.embedder.dim):
                raise ValueError(f"embedder returned shape {vectors.shape}")
        except Exception as exc:  # a backend fault: record it, leave the rest of the pass be
            errors.append(note_failure(ctx, JOB, item, exc))
            failed += 1
            break
        rows = [(t.id, to_blob(v)) for (t, _, _), v in zip(turns, vectors, strict=True)]
        with ctx.store.write() as conn:
            stored = ctx.state.still_current(conn) and save_turn_vectors(
                conn, model, ctx.embedder.dim, rows, upto)
        if not stored and ctx.state.ending:
            break  # memory was forgotten meanwhile: nothing more is saved in this pass
        if stored:
            done += len(turns)
            ctx.state.budget.spend()  # a batch is one item of the pass budget
            note_success(ctx, JOB, item, failures)
        ctx.deps.progress(JOB, done, done + remaining - len(turns))
    if not failed:
        done += embed_derived(ctx, errors)
    ctx.reached()  # the vectors summarize's prompts carry; the words index is recall's
    index_text(ctx, upto)
    with ctx.store.read() as conn:
        left = count_unembedded(conn, model, embed_watermark(conn, model), upto, ctx.state.scope)
    return JobResult(JOB, True, reason, done=done, failed=failed, remaining=left,
                     errors=tuple(errors))


def horizon(ctx: JobContext) -> int:
    """The newest turn this job works up to: the pass's horizon, or (outside a pass) the
    newest turn now."""
    if ctx.state.horizon is not None:
        return ctx.state.horizon
    with ctx.store.read() as conn:
        return max_exchange_id(conn)


def said(turn: Turn, before: Turn | None, after: Turn | None) -> Said:
    return Said(turn.role, turn.content, turn.created_at,
                addressee(turn.role, before.role if before else None,
                          after.role if after else None))


def words_rows(turns: list[tuple[Turn, Turn | None, Turn | None]]) -> list[tuple[int, str]]:
    """(turn id, what the words index holds for it) of turns with their neighbours."""
    return [(t.id, context_text(said(t, b, n), said(b, None, t) if b else None,
                                said(n, t, None) if n else None)) for t, b, n in turns]


def index_text(ctx: JobContext, upto: int, chunk: int = INDEX_CHUNK) -> None:
    """Bring the full-text index up to turn `upto`, in short chunks. A turn is indexed
    with its neighbours' words; the turn before a new one, indexed when it was the last
    of its session, is indexed again with its new neighbour. Once memory was forgotten
    during the pass, nothing more is written and the job ends."""
    while not ctx.state.budget.exhausted() and not ctx.state.ending:
        with ctx.store.read() as conn:
            after = fts_watermark(conn)
            redo = fts_redo(conn)[:chunk]  # beside a forgotten turn
            turns = with_neighbours(conn, unindexed_ids(conn, after, upto, chunk,
                                                            ctx.state.scope))
            before = [b.id for t, b, _ in turns if b is not None]
            again = with_neighbours(conn, sorted(
                indexed(conn, before) | {i for i in redo if i <= after}))
        if not turns and not redo:
            tidy_words(ctx)  # what the last chunks left
            return
        rows = words_rows(turns)
        # Long turns: fewer of them a write (the mark stops at the first turn not indexed).
        size = n = 0
        while n < len(rows) and (n == 0 or size + len(rows[n][1]) <= INDEX_CHARS):
            size += len(rows[n][1])
            n += 1
        turns, rows = turns[:n], rows[:n]
        neighbours = {b.id for _, b, _ in turns if b is not None}
        rows = words_rows([t for t in again if t[0].id in neighbours or t[0].id in redo]) + rows
        with ctx.store.write(*([WORDS_REDO] if redo else [])) as conn:
            if ctx.state.still_current(conn):
                index_texts(conn, rows, tuple(redo))
                settle_words_watermark(conn, upto)
        tidy_words(ctx)


def tidy_words(ctx: JobContext) -> None:
    """The index's parts merged in short writes of their own while there is any to do."""
    for _ in range(TIDY_STEPS):
        if ctx.state.stopped() or not ctx.store.tidy_words():
            break


def embed_derived(ctx: JobContext, errors: list[str]) -> int:
    """Gists and eras without a vector of this model (after a model change), in batches."""
    done = 0
    while not ctx.state.budget.exhausted():
        with ctx.store.read() as conn:
            rows = derived_without_vector(conn, space(ctx.embedder.model),
                                            ctx.config.embed.batch_size)
        if not rows:
            break
        try:
            vectors = ctx.embedder.embed([content for _, _, content, _ in rows])
        except Exception as exc:  # recorded like a turn batch; the pass goes on
            errors.append(note_failure(ctx, JOB, "derived", exc))
            break
        blobs = [(k, key, c, to_blob(v))
                 for (k, key, c, _), v in zip(rows, vectors, strict=True)]
        # Under their users' locks: a row's content is checked and its vector written
        # while no other write can change the row.
        with ctx.store.write(*user_keys(sorted({u for *_, u in rows}))) as conn:
            stored = ctx.state.still_current(conn) and save_derived_vectors(
                conn, space(ctx.embedder.model), blobs)
        done += stored
        ctx.state.budget.spend()
        if stored < len(rows):
            break  # content changed under us; the next pass picks the rest up
    return done


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    """Due for turns without a vector, and for turns with one whose words are not indexed
    yet (a pass that ended between the two writes: a crash, a stop, the store going away,
    its budget spent)."""
    if stats.unembedded_turns:
        return True, f"{stats.unembedded_turns} turns without a vector"
    return stats.unindexed_turns > 0, f"{stats.unindexed_turns} turns not in the words index"


SPEC = JobSpec(name=JOB, drive="continuity", work=work, run=run, model_key="",
               bounds={}, needs=())

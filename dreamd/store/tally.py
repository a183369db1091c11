"""The session tally: dreamd's running count of the app's turns per session, kept up to
date from new rows only (a rowid range), so sensing never scans `exchanges`."""

from __future__ import annotations

from dreamd.store import turns
from dreamd.store.interface import Store
from dreamd.store.turns import apply_tally, claim_tally, new_exchange_groups

# Turns folded in by one write: at most this many session rows change in it (~8 ms).
TALLY_CHUNK = 1_000
# How long a pass waits for turns committed before it began to settle (PostgreSQL: see
# `Store.settle_turns`); a transaction of the app's open longer than this is read next pass.
SETTLE_SECONDS = 5.0


def sync_tally(store: Store, chunk: int = TALLY_CHUNK) -> int:
    """Fold exchanges newer than the tally's watermark into dreamd_sessions.

    Reads only the new rows (a rowid range), in chunks, each folded in by its own short
    write that checks the watermark did not move meanwhile. Returns rows folded in.
    (Every worker waits for the fold: the users a pass claims are read from the tally,
    and a pass that went on with part of it would finish early and reflect beside the
    others' gists.)
    """
    settled = store.settle_turns(wait=SETTLE_SECONDS)
    if settled <= turns.tally_mark(store):
        return 0  # the usual look between passes: nothing new, one short read
    folded = 0
    while True:
        with store.read() as conn:
            marks = turns.marks(conn)
            after, newest = marks.tallied, marks.newest
            if newest <= after:
                return folded
            upto = min(newest, after + chunk)
            groups = new_exchange_groups(conn, after, upto)
        with store.write() as conn:
            if not claim_tally(conn, after, upto):
                continue  # another dreamd folded these rows in; read again
            apply_tally(conn, groups)
        folded += sum(g[2] for g in groups)

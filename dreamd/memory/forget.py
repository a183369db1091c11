"""Forget: erase a user's turns in a scope, and everything dreamd derived from them.

The sequence, each step safe to crash in:

1. Read what the scope holds (after folding new turns into the tally): the sessions, the
   turns up to the newest id now (`upto`; turns that arrive meanwhile are kept), the
   months they touch.
2. One short IMMEDIATE transaction drops what was derived from them: the gists of those
   sessions (a session with turns left is summarized again by the next pass), the user's
   profile and narrative, the eras of the touched months, the agent's reflection state
   with the user, their stored LLM outputs. It bumps the vector epoch, so a pass that
   prepared work before now saves none of it, and writes the journal (the scope and a
   cursor) in `dreamd_state`.
3. The turns go with their vectors and full-text rows, `STEP` turns looked at per
   transaction (10-40 ms of write lock each in `make bench`, so the chat app never
   waits long), the cursor moving in the same transaction. All of this runs with
   `secure_delete` on, so freed bytes are zeroed.
4. The full-text index is merged into one segment, which is what drops the deleted
   words from it, a short step per transaction (`Store.merge_words`; SQLite: FTS5
   `merge` of a few pages each) until nothing is left to merge, then `optimize` (nearly
   free by then) with the journal's end.
5. Checkpoints: the WAL still holds the old page images until SQLite resets it, so a
   TRUNCATE checkpoint is tried after the passive one (it succeeds when no other
   connection is reading); `vacuum` also rewrites the whole file.

While a journal is open, every pass finishes it (`finish_pending`) before anything else,
so if dreamd stops in step 3 or 4, the next pass or forget completes the forget. The next
pass then re-derives what remains: gists of sessions that kept turns, then the user's
profile, eras and narrative from the gists still there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from dreamd.errors import ConfigError
from dreamd.memory.users import require_user
from dreamd.store import erasure
from dreamd.store.erasure import STEP, finish_pending
from dreamd.store.interface import Store
from dreamd.store.tally import sync_tally
from dreamd.store.tiers import tiers_present
from dreamd.store.turns import max_exchange_id

__all__ = ["STEP", "Report", "Scope", "finish_pending", "forget", "parse_before"]


@dataclass(frozen=True)
class Scope:
    user: str
    session: str | None = None
    before: str | None = None  # ISO-8601 UTC; turns made strictly before it

    def describe(self) -> str:
        parts = [f"user {self.user!r}"]
        if self.session is not None:
            parts.append(f"session {self.session!r}")
        if self.before is not None:
            parts.append(f"turns before {self.before}")
        return ", ".join(parts)


def parse_before(text: str) -> str:
    """A --before value (a date or a timestamp) as ISO UTC text; one clear error if not."""
    try:
        moment = datetime.fromisoformat(text)
        return moment.replace(tzinfo=moment.tzinfo or UTC).astimezone(UTC).isoformat()
    except (ValueError, OverflowError):  # not a time, or one UTC cannot hold
        raise ConfigError(f"--before: {text!r} is not a date (YYYY-MM-DD) or ISO timestamp"
                          ) from None


@dataclass
class Report:
    scope: Scope
    dry_run: bool
    turns: int = 0
    sessions_emptied: list[str] = field(default_factory=list)
    sessions_trimmed: list[str] = field(default_factory=list)
    gists: int = 0
    derived: list[str] = field(default_factory=list)
    wal_truncated: bool | None = None
    vacuumed: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "user": self.scope.user, "session": self.scope.session, "before": self.scope.before,
            "dry_run": self.dry_run, "turns": self.turns,
            "sessions_emptied": self.sessions_emptied, "sessions_trimmed": self.sessions_trimmed,
            "gists": self.gists, "derived": self.derived, "wal_truncated": self.wal_truncated,
            "vacuumed": self.vacuumed,
        }


def forget(store: Store, scope: Scope, agent_id: str, *, dry_run: bool = False,
           vacuum: bool = False, step: int = STEP) -> Report:
    """Erase `scope` (see the module's docstring for the sequence). A dry run reads only."""
    whole_user = scope.session is None and scope.before is None
    if not vacuum:  # a vacuum after an earlier forget may name a user no longer here
        with store.read() as conn:
            require_user(conn, scope.user, scope.session)
    while True:
        report = Report(scope, dry_run)
        if not dry_run:
            finish_pending(store, step)  # an earlier forget first: one journal at a time
            sync_tally(store)  # the tally must know every session the user has
        with store.read() as conn:
            upto = max_exchange_id(conn)
            cuts, months = erasure.survey(conn, scope.user, scope.session, scope.before)
            if dry_run and (cuts or whole_user):
                report.derived = tiers_present(conn, scope.user, agent_id, months)
        for cut in cuts:
            report.turns += cut.turns
            (report.sessions_emptied if cut.left == 0 else report.sessions_trimmed).append(
                cut.session_id)
            report.gists += cut.has_gist
        if dry_run or not (cuts or whole_user):
            break
        derived = erasure.open_journal(store, scope.user, scope.before, agent_id,
                                       [c.session_id for c in cuts], months, upto,
                                       whole=whole_user)
        if derived is not None:
            report.derived = derived
            break
        # Another dreamd opened a forget in between: finish it, then look again.
    if dry_run:
        return report
    finish_pending(store, step)
    report.wal_truncated = store.purge_log()
    if vacuum:
        erasure.vacuum(store)
        report.vacuumed = True
        report.wal_truncated = store.purge_log()
    return report

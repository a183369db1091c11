"""A store that went away under the daemon: since when, and what its return records."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace
from datetime import datetime

from dreamd.store.interface import Store
from dreamd.store.runs import end_cut_short_runs
from dreamd.store.state import set_state

# The state row `dreamd status` reads: the last time a worker found the store away.
STATE_KEY = "store_away"


@dataclass(frozen=True)
class Outage:
    """The store away, as one daemon saw it: since the first pass it cut short, and how
    many tries in a row (passes cut short, or that could not begin) found it away."""

    since: datetime
    tries: int = 1

    def again(self) -> Outage:
        return replace(self, tries=self.tries + 1)


def record_return(store: Store, outage: Outage, back: datetime, pid: int,
                  worker: str | None) -> float:
    """The store answers again: this daemon's passes it cut short, still 'running', say
    so and for how long it was away, and the store's state keeps the outage for
    `dreamd status`. Returns the seconds it was away."""
    seconds = (back - outage.since).total_seconds()
    seen = {"since": outage.since.isoformat(), "back": back.isoformat(),
            "seconds": round(seconds, 1), "tries": outage.tries,
            "host": socket.gethostname(), "pid": pid}
    with store.write() as conn:
        end_cut_short_runs(conn, pid, back.isoformat(),
                           f"cut short: the store was away for {seconds:.0f} s", worker)
        set_state(conn, STATE_KEY, json.dumps(seen, sort_keys=True))
    return seconds

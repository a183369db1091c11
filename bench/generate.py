"""Realistic synthetic memory files at scale: users, months, sessions of varied length.

    python -m bench.generate OUT.db --turns 1000000 --sessions 20000 --users 3

Session lengths are drawn from a heavy-tailed distribution (many short chats, a few very
long ones); sessions spread over `--months` months; turns alternate user/assistant and are
built from a vocabulary of everyday topics so that text lengths vary like chat does.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dreamd.store.sqlite.schema import CORE_TABLES

TOPICS = ["work", "my sister", "the dog", "running", "a trip to Japan", "cooking dinner",
          "a book I'm reading", "my back pain", "the new flat", "learning guitar",
          "my manager", "a job interview", "the weekend", "my mother's birthday", "money"]
OPENERS = ["I keep thinking about", "Today was about", "Can we talk about", "Update on",
           "I'm worried about", "Good news about", "A question about"]
DETAILS = ["it went better than expected", "I'm not sure what to do", "it took all day",
           "we argued a bit", "I finally decided", "it cost more than I thought",
           "I felt proud of myself", "nothing really changed", "I need a plan for next week"]


def session_lengths(rng: random.Random, sessions: int, turns: int) -> list[int]:
    raw = [max(2.0, rng.paretovariate(1.3)) for _ in range(sessions)]
    scale = turns / sum(raw)
    lengths = [max(2, int(r * scale)) for r in raw]
    lengths[0] += turns - sum(lengths)  # make the total exact
    if lengths[0] < 2:
        raise ValueError("too few turns for that many sessions")
    return lengths


def turn_text(rng: random.Random, role: str, topic: str) -> str:
    if role == "assistant":
        return f"That sounds important. What matters most to you about {topic}?"
    parts = [f"{rng.choice(OPENERS)} {topic}: {rng.choice(DETAILS)}."]
    parts += [rng.choice(DETAILS).capitalize() + "." for _ in range(rng.randrange(0, 4))]
    return " ".join(parts)


def generate(path: Path, turns: int, sessions: int, users: int, months: int,
             seed: int = 7) -> None:
    rng = random.Random(seed)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(CORE_TABLES)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    span = timedelta(days=30 * months).total_seconds()
    order = sorted(range(sessions), key=lambda _: rng.random())
    starts = sorted(start + timedelta(seconds=rng.uniform(0, span)) for _ in range(sessions))
    conn.execute("BEGIN")
    for index, (sid, length) in enumerate(zip(order, session_lengths(rng, sessions, turns),
                                              strict=True)):
        at = starts[index]
        session = f"u{sid % users}-s{sid:06d}"
        topic = rng.choice(TOPICS)
        conn.execute("INSERT INTO sessions (id, name, created_at) VALUES (?, ?, ?)",
                     (session, topic, at.isoformat()))
        rows = []
        for t in range(length):
            role = "user" if t % 2 == 0 else "assistant"
            rows.append((session, role, turn_text(rng, role, topic),
                         (at + timedelta(seconds=40 * t)).isoformat()))
        conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                         "VALUES (?, ?, ?, ?)", rows)
    conn.execute("COMMIT")
    conn.close()
    if users > 1:
        assign_users(path)


def assign_users(path: Path) -> None:
    """Give each session its user (sessions.user_id, a column dreamd's migrations add)."""
    from dreamd.store.sqlite.migrate import migrate
    from dreamd.store.sqlite.store import connect

    store = connect(path)
    migrate(store)
    with store.write() as conn:
        conn.execute("UPDATE sessions SET user_id = substr(id, 1, instr(id, '-') - 1)")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--months", type=int, default=6)
    args = parser.parse_args()
    generate(args.out, args.turns, args.sessions, args.users, args.months)


if __name__ == "__main__":
    main()

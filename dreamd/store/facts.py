"""The facts tier: statements about people with their dates, replacements and sources."""

from __future__ import annotations

from typing import Any

from dreamd.models import Fact
from dreamd.store.interface import Conn
from dreamd.store.state import next_seq
from dreamd.store.vectors import delete_vectors

_COLUMNS = ("f.id, f.user_id, f.subject, f.about, f.statement, f.valid_from, f.learned_at, "
            "f.valid_to, f.replaced_by, f.origin, f.version, f.pinned, f.withdrawn, f.word_at")
# A fact a person withdrew (retracted, corrected away, a reverted addition) is history:
# no producer, tier or recall reads it.
SAID = " AND f.withdrawn IS NULL"


def _facts(conn: Conn, rows: list[Any]) -> list[Fact]:
    sources: dict[int, list[int]] = {}
    ids = [int(r[0]) for r in rows]
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for fact_id, turn in conn.execute(
                "SELECT fact_id, exchange_id FROM dreamd_fact_sources WHERE fact_id IN "
                f"({','.join('?' * len(chunk))})", chunk):
            sources.setdefault(int(fact_id), []).append(int(turn))
    return [Fact(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                 None if r[8] is None else int(r[8]),
                 tuple(sorted(sources.get(int(r[0]), ()))), str(r[9]), int(r[10]),
                 bool(r[11]), r[12], r[13]) for r in rows]


def facts_of(conn: Conn, user_id: str, current_only: bool = False) -> list[Fact]:
    """A user's facts, oldest first (current ones only, or with those replaced), without
    the ones a person withdrew."""
    where = SAID + (" AND f.replaced_by IS NULL" if current_only else "")
    rows = conn.execute(f"SELECT {_COLUMNS} FROM facts f WHERE f.user_id = ?{where} "
                        "ORDER BY COALESCE(f.valid_from, f.learned_at), f.id", (user_id,))
    return _facts(conn, rows.fetchall())


def withdrawn_facts(conn: Conn, user_id: str) -> list[Fact]:
    """The facts a person withdrew (retracted, corrected away, a reverted addition)."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM facts f WHERE f.user_id = ? "
                        "AND f.withdrawn IS NOT NULL ORDER BY f.id", (user_id,))
    return _facts(conn, rows.fetchall())


def listed_facts(conn: Conn, user_id: str, after_id: int, limit: int, everything: bool
                 ) -> list[Fact]:
    """A page of a user's facts by id, after `after_id`: current ones, or (`everything`)
    those replaced and withdrawn too."""
    where = "" if everything else SAID + " AND f.replaced_by IS NULL"
    rows = conn.execute(f"SELECT {_COLUMNS} FROM facts f WHERE f.user_id = ? AND f.id > ?"
                        f"{where} ORDER BY f.id LIMIT ?", (user_id, after_id, limit))
    return _facts(conn, rows.fetchall())


def fact_origins(conn: Conn, user_id: str) -> dict[int, str]:
    """Which backend and model made each of a user's facts ("llm:…", "extractive:…",
    "fallback:…")."""
    rows = conn.execute("SELECT id, origin FROM facts WHERE user_id = ?", (user_id,))
    return {int(i): str(origin) for i, origin in rows.fetchall()}


def facts_after(conn: Conn, user_id: str, after_id: int) -> list[Fact]:
    """A user's facts with ids above `after_id` (replaced ones too), by id."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM facts f WHERE f.user_id = ? AND f.id > ? "
                        "ORDER BY f.id", (user_id, after_id))
    return _facts(conn, rows.fetchall())


def facts_by_id(conn: Conn, ids: list[int]) -> list[Fact]:
    """These facts, as they stand now, by id."""
    rows: list[Any] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows += conn.execute(f"SELECT {_COLUMNS} FROM facts f WHERE f.id IN "
                             f"({','.join('?' * len(chunk))})", tuple(chunk)).fetchall()
    return sorted(_facts(conn, rows), key=lambda f: f.id)


def sources_added(conn: Conn, user_id: str, upto_fact: int, after_turn: int
                  ) -> list[tuple[int, int]]:
    """(fact id, turn id) of sources turns after `after_turn` gave to a user's facts up to
    `upto_fact`: a known fact said again (from the sources' turn index)."""
    # The few sources past the turn first, by their turn index, then their facts: CROSS
    # JOIN fixes the order, and `+` keeps SQLite from reading `f.id <= ?` as a bound on
    # the sources' fact ids (the planner, left alone, walks every fact the user has).
    return [(int(f), int(t)) for f, t in conn.execute(
        "SELECT s.fact_id, s.exchange_id FROM dreamd_fact_sources s CROSS JOIN facts f "
        "WHERE s.exchange_id > ? AND f.id = s.fact_id AND +f.id <= ? AND f.user_id = ?",
        (after_turn, upto_fact, user_id))]


def add_fact(conn: Conn, user_id: str, subject: str, about: str | None, statement: str,
             valid_from: str | None, learned_at: str, sources: list[int], origin: str,
             word_at: str | None = None) -> int:
    row = conn.execute(
        "INSERT INTO facts (user_id, subject, about, statement, valid_from, learned_at, "
        "origin, dreamd_seq, word_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (user_id, subject, about, statement, valid_from, learned_at, origin, next_seq(conn),
         word_at)
    ).fetchone()
    fact_id = int(row[0])
    add_sources(conn, fact_id, sources)
    return fact_id


def add_sources(conn: Conn, fact_id: int, sources: list[int]) -> None:
    conn.executemany("INSERT INTO dreamd_fact_sources (fact_id, exchange_id) "
                     "VALUES (?, ?) ON CONFLICT DO NOTHING", [(fact_id, s) for s in sources])


def replace_fact(conn: Conn, old_id: int, new_id: int, valid_to: str | None) -> None:
    """The old fact stopped being true when the new one began."""
    conn.execute("UPDATE facts SET valid_to = ?, replaced_by = ?, version = version + 1 "
                 "WHERE id = ? AND replaced_by IS NULL", (valid_to, new_id, old_id))


def drop_facts_of_turns(conn: Conn, ids: list[int]) -> int:
    """Erase the facts any of these turns gave (forget), with the corrections of them: a
    fact they replaced is current again. Returns how many facts went."""
    gone: set[int] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        gone |= {int(r[0]) for r in conn.execute(
            "SELECT fact_id FROM dreamd_fact_sources WHERE exchange_id IN "
            f"({','.join('?' * len(chunk))})", chunk)}
    marks = ",".join("?" * len(gone))
    if gone:
        conn.execute(f"UPDATE facts SET valid_to = NULL, replaced_by = NULL, "
                     f"version = version + 1 WHERE replaced_by IN ({marks})", sorted(gone))
        # A person's word on a forgotten fact goes with it: no text of it is left behind
        # (a fact a person stated in its place stays: those are the person's own words).
        conn.execute(f"DELETE FROM dreamd_corrections WHERE fact_id IN ({marks})",
                     sorted(gone))
        conn.execute(f"DELETE FROM dreamd_fact_sources WHERE fact_id IN ({marks})",
                     sorted(gone))
        conn.execute(f"DELETE FROM facts WHERE id IN ({marks})", sorted(gone))
        for fact_id in sorted(gone):
            delete_vectors(conn, "fact", str(fact_id))
    return len(gone)


def fact_vectors(conn: Conn, model: str, ids: list[int]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    keys = [str(i) for i in ids]
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        for key, blob in conn.execute(
                "SELECT key, vector FROM dreamd_vectors WHERE model = ? AND kind = 'fact' "
                f"AND key IN ({','.join('?' * len(chunk))})", (model, *chunk)):
            out[int(key)] = blob
    return out

"""A person's word on facts: the corrections rows, the facts' states they set, and the
dream diary each pass keeps of what it changed."""

from __future__ import annotations

import json
from typing import Any

from dreamd.models import Correction, DiaryLine, Fact
from dreamd.store.facts import facts_by_id, withdrawn_facts
from dreamd.store.interface import Conn
from dreamd.store.queues import queue_tiers
from dreamd.store.state import next_seq
from dreamd.store.vectors import delete_vectors

_COLUMNS = ("id, user_id, fact_id, action, made_by, why, made_at, old_statement, "
            "new_statement, new_fact_id, reverts, reverted_by, dreamd_seq")


def _corrections(rows: list[Any]) -> list[Correction]:
    def num(v: Any) -> int | None:
        return None if v is None else int(v)

    return [Correction(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5], r[6], r[7], r[8],
                       num(r[9]), num(r[10]), num(r[11]), int(r[12])) for r in rows]


def fact_by_id(conn: Conn, fact_id: int) -> Fact | None:
    """One fact as it stands, withdrawn or not, whoever's it is."""
    found = facts_by_id(conn, [fact_id])
    return found[0] if found else None


def add_correction(conn: Conn, user_id: str, fact_id: int, action: str, made_by: str,
                   why: str | None, made_at: str, old: str | None = None,
                   new: str | None = None, new_fact: int | None = None,
                   reverts: int | None = None) -> int:
    """Inside a write: the row of a person's word, numbered after every derived row so far
    (the tiers built before it are behind it), and the user's tiers queued for a rebuild."""
    row = conn.execute(
        "INSERT INTO dreamd_corrections (user_id, fact_id, action, made_by, why, made_at, "
        "old_statement, new_statement, new_fact_id, reverts, dreamd_seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (user_id, fact_id, action, made_by, why, made_at, old, new, new_fact, reverts,
         next_seq(conn))).fetchone()
    queue_tiers(conn, user_id)
    return int(row[0])


def mark_reverted(conn: Conn, correction_id: int, by: int) -> None:
    conn.execute("UPDATE dreamd_corrections SET reverted_by = ? WHERE id = ?",
                 (by, correction_id))


def correction_by_id(conn: Conn, correction_id: int) -> Correction | None:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM dreamd_corrections WHERE id = ?",
                        (correction_id,)).fetchall()
    return _corrections(rows)[0] if rows else None


def corrections_of_facts(conn: Conn, fact_ids: list[int]) -> list[Correction]:
    """Every correction of these facts (or that made one of them), oldest first."""
    if not fact_ids:
        return []
    marks = ",".join("?" * len(fact_ids))
    rows = conn.execute(f"SELECT {_COLUMNS} FROM dreamd_corrections WHERE fact_id IN "
                        f"({marks}) OR new_fact_id IN ({marks}) ORDER BY id",
                        (*fact_ids, *fact_ids)).fetchall()
    return _corrections(rows)


def corrections_of(conn: Conn, user_id: str, after_seq: int = 0) -> list[Correction]:
    """A user's corrections numbered after `after_seq`, oldest first."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM dreamd_corrections WHERE user_id = ? "
                        "AND dreamd_seq > ? ORDER BY dreamd_seq", (user_id, after_seq))
    return _corrections(rows.fetchall())


def word_seq(conn: Conn, user_id: str) -> int:
    """The number of the user's newest correction (0: none): a producer reads it with its
    inputs, and writes only if it has not moved."""
    row = conn.execute("SELECT COALESCE(MAX(dreamd_seq), 0) FROM dreamd_corrections "
                       "WHERE user_id = ?", (user_id,)).fetchone()
    return int(row[0])


def set_fact(conn: Conn, fact_id: int, version: int, **state: Any) -> bool:
    """Inside a write: change a fact's `pinned`, `withdrawn`, `word_at`, `replaced_by` or
    `valid_to` if it is still at `version`; its version moves on. False: it was not."""
    sets = ", ".join(f"{column} = ?" for column in state)
    cursor = conn.execute(f"UPDATE facts SET {sets}, version = version + 1 "
                          "WHERE id = ? AND version = ?", (*state.values(), fact_id, version))
    return cursor.rowcount == 1


def drop_user_word(conn: Conn, user_id: str) -> None:
    """Forget of a whole user: their corrections go, and the facts they stated with no
    turn behind them (the facts their turns gave go with the turns)."""
    conn.execute("DELETE FROM dreamd_corrections WHERE user_id = ?", (user_id,))
    stated = [int(r[0]) for r in conn.execute(
        "SELECT id FROM facts f WHERE user_id = ? AND NOT EXISTS (SELECT 1 FROM "
        "dreamd_fact_sources s WHERE s.fact_id = f.id)", (user_id,))]
    for fact_id in stated:
        conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
        delete_vectors(conn, "fact", str(fact_id))


def drop_diary(conn: Conn, user_id: str) -> None:
    """A forget: the user's diary goes (its lines may quote what is forgotten)."""
    conn.execute("DELETE FROM dreamd_diary WHERE user_id = ?", (user_id,))


def write_diary(conn: Conn, run_id: int | None, user_id: str, job: str, kind: str,
                detail: dict[str, Any], now: str) -> None:
    """Inside a producer's write: one line of what the pass changed (outside a pass,
    nothing)."""
    if run_id is None:
        return
    conn.execute("INSERT INTO dreamd_diary (run_id, user_id, job, kind, detail, made_at) "
                 "VALUES (?, ?, ?, ?, ?, ?)",
                 (run_id, user_id, job, kind, json.dumps(detail, sort_keys=True), now))


def diary_of_run(conn: Conn, run_id: int) -> list[DiaryLine]:
    rows = conn.execute("SELECT run_id, user_id, job, kind, detail, made_at FROM dreamd_diary "
                        "WHERE run_id = ? ORDER BY user_id, id", (run_id,)).fetchall()
    return [DiaryLine(int(r[0]), r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]


def last_diary_run(conn: Conn) -> int | None:
    """The newest pass that wrote in the diary."""
    row = conn.execute("SELECT MAX(run_id) FROM dreamd_diary").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def diary_lines(conn: Conn, user_id: str) -> list[tuple[int, str, str]]:
    """(id, kind, detail) of a user's diary, for the person's words in it."""
    return [(int(r[0]), r[1], r[2]) for r in conn.execute(
        "SELECT id, kind, detail FROM dreamd_diary WHERE user_id = ?", (user_id,))]


def rewrite_diary_line(conn: Conn, line_id: int, detail: str) -> None:
    conn.execute("UPDATE dreamd_diary SET detail = ? WHERE id = ?", (detail, line_id))


def prune_diary(conn: Conn, keep_runs: int) -> None:
    """Only the diary of the last `keep_runs` passes that wrote one is kept."""
    conn.execute("DELETE FROM dreamd_diary WHERE run_id < (SELECT MIN(run_id) FROM (SELECT "
                 "DISTINCT run_id FROM dreamd_diary ORDER BY run_id DESC LIMIT ?) AS kept)",
                 (keep_runs,))


def word_parts(conn: Conn, user_id: str) -> tuple[int, list[Fact], list[Correction]]:
    """What a user's word is made of, besides their current facts: the newest
    correction's number, the facts they withdrew, and their corrections."""
    return word_seq(conn, user_id), withdrawn_facts(conn, user_id), corrections_of(conn, user_id)


# The derived texts a person's word may reach, each by its key: what `scrub` rewrites.
_TEXTS = {"summaries": ("session_id", "content"), "profile": ("id", "content"),
          "narrative": ("id", "content"), "dreamd_outputs": ("item", "output")}


def user_texts(conn: Conn, user_id: str) -> list[tuple[str, str, str]]:
    """(table, key, text) of every derived text of a user's: gists, profile, narrative,
    eras (keyed "user|month") and the stored model answers that made them."""
    out = [("summaries", str(s), str(c)) for s, c in conn.execute(
        "SELECT session_id, content FROM summaries WHERE user_id = ?", (user_id,))]
    for table in ("profile", "narrative"):
        out += [(table, str(k), str(c)) for k, c in conn.execute(
            f"SELECT id, content FROM {table} WHERE user_id = ?", (user_id,))]
    out += [("eras", f"{user_id}|{m}", str(c)) for m, c in conn.execute(
        "SELECT month, content FROM eras WHERE user_id = ?", (user_id,))]
    items = sorted({k for _, k, _ in out})
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        out += [("dreamd_outputs", f"{job}\t{item}", str(o)) for job, item, o in conn.execute(
            "SELECT job, item, output FROM dreamd_outputs WHERE item IN "
            f"({','.join('?' * len(chunk))})", chunk)]
    return out


def rewrite_text(conn: Conn, table: str, key: str, old: str, new: str) -> bool:
    """Inside a write: a derived text as a person's word has it, if unchanged since read;
    a stored model answer that said what they withdrew is dropped instead."""
    if table == "dreamd_outputs":
        job, _, item = key.partition("\t")
        cursor = conn.execute("DELETE FROM dreamd_outputs WHERE job = ? AND item = ? "
                              "AND output = ?", (job, item, old))
    elif table == "eras":
        user_id, _, month = key.rpartition("|")
        cursor = conn.execute("UPDATE eras SET content = ? WHERE user_id = ? AND month = ? "
                              "AND content = ?", (new, user_id, month, old))
    else:
        column, text = _TEXTS[table]
        cursor = conn.execute(f"UPDATE {table} SET {text} = ? WHERE {column} = ? "
                              f"AND {text} = ?", (new, key, old))
    return cursor.rowcount == 1

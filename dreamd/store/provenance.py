"""Provenance reads for export: each turn with its vectors and index row, each derived
row with when, by what, and from which turns it was made."""

from __future__ import annotations

from typing import Any

from dreamd.store.interface import Conn
from dreamd.store.tiers import tier_inputs
from dreamd.store.vectors import words_key


def turn_ids_of(conn: Conn, inputs: dict[str, int]) -> list[int]:
    """The turns a tier was built from: each input session's turns up to its mark."""
    ids: list[int] = []
    for session, last_id in sorted(inputs.items()):
        ids += [int(r[0]) for r in conn.execute(
            "SELECT id FROM exchanges WHERE session_id = ? AND id <= ? ORDER BY id",
            (session, last_id))]
    return ids


def vector_models_of(conn: Conn, kind: str, key: str) -> list[str]:
    """Models that hold a vector of this derived row."""
    return [r[0] for r in conn.execute(
        "SELECT model FROM dreamd_vectors WHERE kind = ? AND key = ? ORDER BY model",
        (kind, key))]


def stored_output(conn: Conn, job: str, item: str) -> str | None:
    """The raw LLM output stored for an item, if any."""
    row = conn.execute("SELECT output FROM dreamd_outputs WHERE job = ? AND item = ?",
                       (job, item)).fetchone()
    return row[0] if row else None


def session_record(conn: Conn, session_id: str) -> dict[str, Any]:
    """A session with its turns, their vectors' models and index rows, and its tally."""
    meta = conn.execute("SELECT name, created_at FROM sessions WHERE id = ?",
                        (session_id,)).fetchone()
    tally = conn.execute(
        "SELECT turns, summarized_id, summarized_turns, month FROM dreamd_sessions "
        "WHERE session_id = ?", (session_id,)).fetchone()
    turns = []
    for tid, role, content, created_at in conn.execute(
            "SELECT id, role, content, created_at FROM exchanges WHERE session_id = ? "
            "ORDER BY id", (session_id,)):
        turns.append({
            "id": tid, "role": role, "content": content, "created_at": created_at,
            "vectors": [r[0] for r in conn.execute(
                "SELECT model FROM dreamd_exchange_vectors WHERE exchange_id = ? "
                "ORDER BY model", (tid,))],
            "in_search_index": conn.execute(
                f"SELECT 1 FROM dreamd_fts WHERE {words_key(conn)} = ?", (tid,)
            ).fetchone() is not None,
        })
    return {
        "id": session_id,
        "name": meta[0] if meta else None,
        "created_at": meta[1] if meta else None,
        "has_sessions_row": meta is not None,
        "tally": None if tally is None else {
            "turns": tally[0], "summarized_through": tally[1], "summarized_turns": tally[2],
            "month": tally[3]},
        "turns": turns,
    }


def gist_record(conn: Conn, session_id: str) -> dict[str, Any] | None:
    """A session's gist with its provenance, if it has one."""
    row = conn.execute(
        "SELECT content, last_exchange_id, created_at, dreamd_source, dreamd_month, dreamd_seq "
        "FROM summaries WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        return None
    return {
        "session_id": session_id, "content": row[0], "made_at": row[2], "made_by": row[3],
        "month": row[4], "seq": row[5],
        "made_from_turns": turn_ids_of(conn, {session_id: int(row[1])}),
        "vectors": vector_models_of(conn, "summary", session_id),
    }


def tier_record(conn: Conn, table: str, where: str, args: tuple[Any, ...],
                content_cols: str) -> dict[str, Any] | None:
    """A profile, era or narrative row with its provenance, if there is one."""
    row = conn.execute(f"SELECT {content_cols}, dreamd_source, dreamd_seq FROM {table} "
                       f"WHERE {where}", args).fetchone()
    if row is None:
        return None
    inputs = tier_inputs(conn, table, where, args)
    raw = conn.execute(f"SELECT dreamd_inputs FROM {table} WHERE {where}", args).fetchone()[0]
    return {
        "content": row[0], "made_at": row[1], "made_by": row[2], "seq": row[3],
        # None: built before dreamd recorded provenance (a pass rebuilds it with one).
        "made_from_gists": sorted(inputs) if raw is not None else None,
        "made_from_turns": turn_ids_of(conn, inputs) if raw is not None else None,
    }

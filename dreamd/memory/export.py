"""Export: everything the memory file holds about one user, as one JSON document.

Turns by session, and every derived row with its provenance: the turns it was made
from, when, and by which backend and model. Vectors are listed by model (their numbers
add nothing a person can read); search-index rows and dreamd's bookkeeping are listed
with the turn or session they belong to.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from dreamd import __version__
from dreamd.ids import era_key, narrative_id, profile_id, self_state_id
from dreamd.memory.users import require_user
from dreamd.store import queries as q
from dreamd.store.connect import Store

FORMAT = "dreamd-export/1"


def _turn_ids(conn: sqlite3.Connection, inputs: dict[str, int]) -> list[int]:
    """The turns a tier was built from: each input session's turns up to its mark."""
    ids: list[int] = []
    for session, last_id in sorted(inputs.items()):
        ids += [int(r[0]) for r in conn.execute(
            "SELECT id FROM exchanges WHERE session_id = ? AND id <= ? ORDER BY id",
            (session, last_id))]
    return ids


def _models(conn: sqlite3.Connection, kind: str, key: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT model FROM dreamd_vectors WHERE kind = ? AND key = ? ORDER BY model",
        (kind, key))]


def _outputs(conn: sqlite3.Connection, job: str, item: str) -> str | None:
    row = conn.execute("SELECT output FROM dreamd_outputs WHERE job = ? AND item = ?",
                       (job, item)).fetchone()
    return row[0] if row else None


def _session(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
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
                "SELECT 1 FROM dreamd_fts WHERE rowid = ?", (tid,)).fetchone() is not None,
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


def _gist(conn: sqlite3.Connection, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT content, last_exchange_id, created_at, dreamd_source, dreamd_month, dreamd_seq "
        "FROM summaries WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        return None
    return {
        "session_id": session_id, "content": row[0], "made_at": row[2], "made_by": row[3],
        "month": row[4], "seq": row[5],
        "made_from_turns": _turn_ids(conn, {session_id: int(row[1])}),
        "vectors": _models(conn, "summary", session_id),
    }


def _tier(conn: sqlite3.Connection, table: str, where: str, args: tuple[Any, ...],
          content_cols: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {content_cols}, dreamd_source, dreamd_seq FROM {table} "
                       f"WHERE {where}", args).fetchone()
    if row is None:
        return None
    inputs = q.tier_inputs(conn, table, where, args)
    raw = conn.execute(f"SELECT dreamd_inputs FROM {table} WHERE {where}", args).fetchone()[0]
    return {
        "content": row[0], "made_at": row[1], "made_by": row[2], "seq": row[3],
        # None: built before dreamd recorded provenance (a pass rebuilds it with one).
        "made_from_gists": sorted(inputs) if raw is not None else None,
        "made_from_turns": _turn_ids(conn, inputs) if raw is not None else None,
    }


def export_user(store: Store, user: str, agent_id: str) -> dict[str, Any]:
    """The whole document for `user`, read in one consistent snapshot."""
    with store.read() as conn:
        require_user(conn, user)
        sessions = sorted(q.sessions_of(conn, [user]))
        profile = _tier(conn, "profile", "id = ?", (profile_id(user),), "content, updated_at")
        if profile is not None:
            profile["stored_llm_output"] = _outputs(conn, "profile", profile_id(user))
        narrative = _tier(conn, "narrative", "id = ?", (narrative_id(user),),
                          "content, updated_at")
        if narrative is not None:
            narrative["stored_llm_output"] = _outputs(conn, "narrative", narrative_id(user))
        eras = []
        for month in sorted(q.era_seqs(conn, user)):
            era = _tier(conn, "eras", "user_id = ? AND month = ?", (user, month),
                        "content, created_at")
            assert era is not None
            key = era_key(user, month)
            eras.append({"month": month, **era, "vectors": _models(conn, "era", key),
                         "stored_llm_output": _outputs(conn, "eras", key)})
        state_key = self_state_id(agent_id, user)
        state = q.self_state(conn, state_key)
        reflection = None
        if state is not None:
            data, updated_at = state
            marks: dict[str, Any] = data["dreamd"] if isinstance(data.get("dreamd"), dict) else {}
            reflection = {
                "id": state_key, "data": data, "made_at": updated_at,
                "made_by": marks.get("source"),
                "made_from_turns_through": marks.get("reflected_exchange_id"),
                "stored_llm_output": _outputs(conn, "reflect", state_key),
            }
        gists = [g for s in sessions if (g := _gist(conn, s)) is not None]
        return {
            "format": FORMAT,
            "dreamd_version": __version__,
            "user": user,
            "exported_at": datetime.now(UTC).isoformat(),
            "sessions": [_session(conn, s) for s in sessions],
            "gists": gists,
            "profile": profile,
            "eras": eras,
            "narrative": narrative,
            "reflection": reflection,
        }


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, indent=2, sort_keys=False) + "\n"

"""Export: everything the memory file holds about one user, as one JSON document.

Turns by session, and every derived row with its provenance: the turns it was made
from, when, and by which backend and model. Vectors are listed by model (their numbers
add nothing a person can read); search-index rows and dreamd's bookkeeping are listed
with the turn or session they belong to.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from dreamd import __version__
from dreamd.ids import era_key, narrative_id, profile_id, self_state_id
from dreamd.memory.users import require_user
from dreamd.store.corrections import corrections_of
from dreamd.store.facts import fact_origins, listed_facts
from dreamd.store.interface import Store
from dreamd.store.provenance import (
    gist_record,
    session_record,
    stored_output,
    tier_record,
    vector_models_of,
)
from dreamd.store.tiers import era_seqs, self_state
from dreamd.store.turns import sessions_of

FORMAT = "dreamd-export/1"
EVERY_FACT = 1 << 62


def export_user(store: Store, user: str, agent_id: str) -> dict[str, Any]:
    """The whole document for `user`, read in one consistent snapshot."""
    with store.read() as conn:
        require_user(conn, user)
        sessions = sorted(sessions_of(conn, [user]))
        profile = tier_record(conn, "profile", "id = ?", (profile_id(user),), "content, updated_at")
        if profile is not None:
            profile["stored_llm_output"] = stored_output(conn, "profile", profile_id(user))
        narrative = tier_record(conn, "narrative", "id = ?", (narrative_id(user),),
                          "content, updated_at")
        if narrative is not None:
            narrative["stored_llm_output"] = stored_output(conn, "narrative", narrative_id(user))
        eras = []
        for month in sorted(era_seqs(conn, user)):
            era = tier_record(conn, "eras", "user_id = ? AND month = ?", (user, month),
                        "content, created_at")
            assert era is not None
            key = era_key(user, month)
            eras.append({"month": month, **era, "vectors": vector_models_of(conn, "era", key),
                         "stored_llm_output": stored_output(conn, "eras", key)})
        state_key = self_state_id(agent_id, user)
        state = self_state(conn, state_key)
        reflection = None
        if state is not None:
            data, updated_at = state
            marks: dict[str, Any] = data["dreamd"] if isinstance(data.get("dreamd"), dict) else {}
            reflection = {
                "id": state_key, "data": data, "made_at": updated_at,
                "made_by": marks.get("source"),
                "made_from_turns_through": marks.get("reflected_exchange_id"),
                "stored_llm_output": stored_output(conn, "reflect", state_key),
            }
        gists = [g for s in sessions if (g := gist_record(conn, s)) is not None]
        origins = fact_origins(conn, user)
        facts = [{"id": f.id, "subject": f.subject, "about": f.about, "statement": f.statement,
                  "valid_from": f.valid_from, "learned_at": f.learned_at,
                  "valid_to": f.valid_to, "replaced_by": f.replaced_by,
                  "made_by": origins.get(f.id), "from_turns": list(f.sources),
                  "version": f.version, "pinned": f.pinned, "withdrawn": f.withdrawn,
                  "person_spoke_at": f.word_at}
                 for f in listed_facts(conn, user, 0, EVERY_FACT, everything=True)]
        corrections = [dataclasses.asdict(c) for c in corrections_of(conn, user)]
        return {
            "format": FORMAT,
            "dreamd_version": __version__,
            "user": user,
            "exported_at": datetime.now(UTC).isoformat(),
            "sessions": [session_record(conn, s) for s in sessions],
            "gists": gists,
            "facts": facts,
            # A person's word on the facts, each correction with who, when, what and why.
            "corrections": corrections,
            "profile": profile,
            "eras": eras,
            "narrative": narrative,
            "reflection": reflection,
        }


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, indent=2, sort_keys=False) + "\n"

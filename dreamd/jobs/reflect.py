"""reflect: evolve the agent's self-state from what happened since the last reflection."""

from __future__ import annotations

import json
from typing import Any

from dreamd.errors import OutputInvalid
from dreamd.jobs.base import JobContext, complete_once, run_single
from dreamd.models import JobResult
from dreamd.prompts import reflect_prompt, repair_prompt, turn_line
from dreamd.store import queries as q

JOB = "reflect"
RECENT_TURNS = 200

# The reflection schema: key -> (type, check). Invalid output keeps the old state.
SCHEMA: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "mood": (str, lambda v: 0 < len(v.strip()) <= 40),
    "mood_score": ((int, float), lambda v: -1.0 <= v <= 1.0),
    "energy": ((int, float), lambda v: 0.0 <= v <= 1.0),
    "self_narrative": (str, lambda v: 0 < len(v.strip()) <= 2000),
    "reflection": (str, lambda v: 0 < len(v.strip()) <= 1000),
    "topics": (list, lambda v: len(v) <= 20 and all(isinstance(t, str) for t in v)),
}


def validate(text: str) -> dict[str, Any]:
    """Parse and check a reflection; raise OutputInvalid naming the first problem."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OutputInvalid(f"reflection is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OutputInvalid("reflection is not a JSON object")
    for key, (kind, check) in SCHEMA.items():
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, kind) or not check(value):
            raise OutputInvalid(f"reflection field {key!r} is missing or invalid: {value!r}")
    return {key: data[key] for key in SCHEMA}


def evolve(previous: dict[str, Any], reflection: dict[str, Any], marks: dict[str, Any],
           limit: int) -> dict[str, Any]:
    """The next self-state: new mood and narrative, a bounded list of reflections."""
    state = dict(previous)
    state.update({k: reflection[k] for k in ("mood", "mood_score", "energy", "self_narrative",
                                              "topics")})
    history = [r for r in previous.get("reflections", []) if isinstance(r, str)]
    state["reflections"] = [*history, reflection["reflection"]][-limit:]
    state["dreamd"] = {**previous.get("dreamd", {}), **marks}
    return state


def reflect_once(ctx: JobContext) -> bool:
    user = ctx.config.user.id
    item = f"agent:{ctx.config.agent.id}"
    with ctx.store.read() as conn:
        cached = q.cached_output(conn, JOB, item)
        current = q.self_state(conn, ctx.config.agent.id)
        previous, updated_at = current if current else ({}, None)
        marks = previous.get("dreamd", {}) if isinstance(previous.get("dreamd"), dict) else {}
        seen_id = int(marks.get("reflected_exchange_id", 0))
        turns = q.recent_user_turns(conn, user, seen_id, RECENT_TURNS)
        new_turns = q.count_exchanges_after(conn, seen_id)
        top_id = q.max_exchange_id(conn)
        top_seq = q.max_gist_seq(conn, user)
        sessions = q.count_sessions(conn, user)
    if new_turns == 0 and top_seq <= int(marks.get("reflected_seq", 0)):
        return False
    prompt = reflect_prompt(
        ctx.names, previous, [turn_line(t.role, t.content) for t in turns if t.role == "user"],
        {"new_turns": new_turns, "sessions": sessions, "now": ctx.now_text()},
    )
    completion, digest = complete_once(ctx, prompt, cached)
    raw = completion.text
    try:
        reflection = validate(raw)
    except OutputInvalid as exc:
        if not ctx.llm:
            raise
        # One repair attempt; if that fails too, the old self-state stays.
        raw = ctx.complete(repair_prompt(raw, str(exc))).text
        reflection = validate(raw)
    state = evolve(previous, reflection, {
        "reflected_exchange_id": top_id,
        "reflected_seq": top_seq,
        "reflected_at": ctx.now_text(),
        "source": ctx.source,
    }, ctx.config.reflect.max_reflections)
    with ctx.store.write() as conn:
        stored = q.save_self_state(conn, ctx.config.agent.id, state, ctx.now_text(), updated_at)
        if stored:
            q.save_output(conn, JOB, item, digest, raw)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    return run_single(ctx, JOB, f"agent:{ctx.config.agent.id}", reason, lambda: reflect_once(ctx))

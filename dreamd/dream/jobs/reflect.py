"""reflect: evolve the agent's self-state from what happened since the last reflection."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dreamd.backends.validate import Refusal, source_of, ungrounded
from dreamd.config import Config
from dreamd.dream.jobs.base import JobContext, complete_once
from dreamd.dream.jobs.fitting import newest_that_fit
from dreamd.dream.jobs.pool import run_keyed
from dreamd.dream.prompts import reflect_prompt, repair_prompt, turn_line
from dreamd.errors import OutputInvalid
from dreamd.ids import self_state_id
from dreamd.models import BacklogStats, JobResult, JobSpec, Prompt, Turn
from dreamd.store.interface import Conn
from dreamd.store.runs import cached_output, save_output
from dreamd.store.tiers import (
    ReflectionMarks,
    max_gist_seq,
    reflection_marks,
    save_reflection_marks,
    save_self_state,
    self_state,
    users_with_gists,
)
from dreamd.store.turns import (
    count_sessions,
    count_user_turns_after,
    max_exchange_id,
    recent_user_turns,
    users_with_turns_after,
)

JOB = "reflect"
RECENT_TURNS = 200

def validate(text: str, source: str = "") -> dict[str, Any]:
    """Parse and check a reflection against its model (Reflection) and, given the prompt
    as `source`, whether it is grounded in it; raise OutputInvalid naming the first
    problem. Invalid output keeps the old state."""
    from dreamd.dream.answers import Reflection, checked  # pydantic: only once answered

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OutputInvalid(f"reflection is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OutputInvalid("reflection is not a JSON object")
    refused = checked(Reflection, data)
    if isinstance(refused, str):
        raise OutputInvalid(f"reflection field {refused!r} is missing or invalid: "
                            f"{data.get(refused)!r}")
    if source:
        said = "\n".join([data["self_narrative"], data["reflection"], *data["topics"]])
        made_up = ungrounded(said, source)
        if made_up:
            raise OutputInvalid(f"reflection names what its input does not: "
                                f"{', '.join(made_up[:4])}")
    return {key: data[key] for key in Reflection.model_fields}


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


def users_to_reflect(ctx: JobContext) -> tuple[list[str], ReflectionMarks]:
    """Users with turns or gists since the last complete reflect job, and the marks that
    job will leave when every one of them is done."""
    # Where workers share the store, a gist's number is drawn before its write commits:
    # the newest number is read while no write runs, so no smaller one can come later.
    with (ctx.store.write(alone=True) if ctx.store.shared else ctx.store.read()) as conn:
        marks = reflection_marks(conn, ctx.config.agent.id)
        users = set(users_with_turns_after(conn, marks.exchange_id))
        users |= {u for u in users_with_gists(conn) if max_gist_seq(conn, u) > marks.seq}
        reached = ReflectionMarks(max_exchange_id(conn), max_gist_seq(conn, None),
                                    ctx.now_text())
    return sorted(users), reached


@dataclass(frozen=True)
class Work:
    user_id: str
    key: str
    previous: dict[str, Any]
    updated_at: str | None
    turns: list[Turn]
    new_turns: int
    top_id: int
    top_seq: int
    sessions: int
    cached: tuple[str, str] | None

class Reflections:
    """Users with turns or gists since the last reflection: each one's self-state
    reflected and saved apart. A KeyedJob (see dreamd.dream.jobs.pool.run_keyed)."""

    name = JOB
    progress = False

    def __init__(self, agent: str, users: list[str]) -> None:
        self.agent = agent
        self.users = users

    def todo(self, ctx: JobContext) -> list[str]:
        return self.users

    def remaining(self, ctx: JobContext) -> int:
        return 0  # the next pass looks again, past the marks this one leaves

    def key(self, user: str) -> str:
        return self_state_id(self.agent, user)

    def prepare(self, ctx: JobContext, user: str) -> Work | None:
        key = self_state_id(ctx.config.agent.id, user)
        with ctx.store.read() as conn:
            current = self_state(conn, key)
            previous, updated_at = current if current else ({}, None)
            marks = previous.get("dreamd", {}) if isinstance(previous.get("dreamd"), dict) else {}
            seen_id = int(marks.get("reflected_exchange_id", 0))
            work = Work(
                user_id=user, key=key, previous=previous, updated_at=updated_at,
                turns=recent_user_turns(conn, user, seen_id, RECENT_TURNS),
                new_turns=count_user_turns_after(conn, user, seen_id),
                top_id=max_exchange_id(conn), top_seq=max_gist_seq(conn, user),
                sessions=count_sessions(conn, user), cached=cached_output(conn, JOB, key))
        if work.new_turns == 0 and work.top_seq <= int(marks.get("reflected_seq", 0)):
            return None
        return work

    def think(self, ctx: JobContext, work: Work) -> tuple[dict[str, Any], str, str]:
        """The reflection, validated; one repair attempt when an LLM's answer is invalid."""
        def build(lines: list[str]) -> Prompt:
            return reflect_prompt(
                ctx.names_for(work.user_id), work.previous, lines,
                {"new_turns": work.new_turns, "sessions": work.sessions, "now": ctx.now_text()})

        # What the people said, whoever they are ("user", or the names an imported chat
        # keeps): not the agent's own replies.
        agent = {"assistant", ctx.names_for(work.user_id)["agent"].strip().lower()}
        said = [turn_line(t.role, t.content) for t in work.turns if t.role.lower() not in agent]
        prompt = build(newest_that_fit(ctx, said, build))  # the latest turns, as many as fit
        source = source_of(prompt) if ctx.asking.asks_model else ""

        def check(raw: str) -> Refusal | None:
            try:
                validate(raw, source)
            except OutputInvalid as exc:
                why = str(exc)
                return Refusal("grounded" if "names what" in why else "shape", why)
            return None

        # One repair request where it can help; if that fails too, the old self-state stays.
        completion, digest = complete_once(ctx, prompt, work.cached, check=check,
                                           again=lambda _, why, raw: repair_prompt(raw, why.why))
        raw = completion.text
        return validate(raw, source), digest, raw

    def save(self, ctx: JobContext, conn: Conn, work: Work,
             result: tuple[dict[str, Any], str, str]) -> bool:
        reflection, digest, raw = result
        state = evolve(work.previous, reflection, {
            "reflected_exchange_id": work.top_id,
            "reflected_seq": work.top_seq,
            "reflected_at": ctx.now_text(),
            "source": ctx.asking.source,
            "user_id": work.user_id,
        }, ctx.config.reflect.max_reflections)
        stored = save_self_state(conn, work.key, state, ctx.now_text(), work.updated_at)
        if stored:
            save_output(conn, JOB, work.key, digest, raw)
        return stored


def run(ctx: JobContext, reason: str) -> JobResult:
    """One reflection per user with news; the agent's marks move once all are done."""
    users, reached = users_to_reflect(ctx)
    result = run_keyed(ctx, Reflections(ctx.config.agent.id, users), reason)
    if not result.failed and not result.skipped and not ctx.state.stopped():
        with ctx.store.write() as conn:
            if ctx.state.still_current(conn):
                save_reflection_marks(conn, reached)
    return result


def work(stats: BacklogStats, force: bool, config: Config) -> tuple[bool, str]:
    return (stats.turns_since_reflection > 0 or stats.gists_since_reflection > 0), (
        f"{stats.turns_since_reflection} turns and {stats.gists_since_reflection} gists "
        "since the last reflection")


SPEC = JobSpec(name=JOB, drive="curiosity", work=work, run=run, model_key="reflect_model",
               bounds={'reflect': 6000}, needs=("summarize",))

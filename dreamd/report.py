"""What dreamd tells a person about a memory store, as plain dicts: `status` (backlog,
drives, the last passes and why each job ran, workers, failures, the last pass's diary)
and `show` (what it keeps about a user). Below the command line and the server, which
both render it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from dreamd.config import Config, server_url
from dreamd.dream import drives as drv
from dreamd.dream.sensing import read_backlog
from dreamd.ids import narrative_id, profile_id, self_state_id
from dreamd.memory.users import require_user
from dreamd.models import DiaryLine
from dreamd.runtime.lock import holder_of
from dreamd.runtime.outage import STATE_KEY as STORE_AWAY
from dreamd.store.corrections import diary_of_run, last_diary_run
from dreamd.store.erasure import pending as pending_forget
from dreamd.store.fallback import fallback_counts
from dreamd.store.interface import Store
from dreamd.store.leases import workers as lease_workers
from dreamd.store.runs import failures, recent_runs
from dreamd.store.state import get_state
from dreamd.store.tiers import (
    eras_for_user,
    gists_for_user,
    narrative_row,
    profile_row,
    self_state,
    tier_sources,
)
from dreamd.store.turns import backlog_by_user, newest_turn_id, raw_counts, tally_watermark
from dreamd.url import shown


def status(store: Store, config: Config, embed_model: str, now: datetime,
           runs: int = 5) -> dict[str, Any]:
    """Backlog, drives, the last passes with each job's reason, failures and quarantine."""
    backlog = read_backlog(store, config, now, embed_model)
    with store.read() as conn:
        unfolded = max(0, newest_turn_id(conn) - tally_watermark(conn))
        recent = recent_runs(conn, runs)
        fails = failures(conn)
        forget = pending_forget(conn)
        next_pass = get_state(conn, "next_pass_at")
        away = get_state(conn, STORE_AWAY)
        waiting, most = backlog_by_user(conn)
        fell_back = fallback_counts(conn)
        diary_run = last_diary_run(conn)
        diary = diary_of_run(conn, diary_run) if diary_run is not None else []
    # One dreamd at a time holds a store that is not shared: the instance lock on its file.
    holder = None if store.shared else holder_of(Path(store.where))
    workers = ([w.__dict__ for w in lease_workers(store, 3 * config.workers.lease_seconds)]
               if store.shared else None)
    return {
        "db": store.where,
        store.engine: store.engine_info(),
        "daemon": {"pid": holder, "next_pass_at": next_pass if holder else None},
        "workers": workers,
        # The last time a worker found the store's server away, once it came back.
        "store_away": json.loads(away) if away else None,
        "users_waiting": {"users": waiting,
                          "most": [{"user": u, "sessions": s, "turns": t}
                                   for u, s, t in most]},
        "backends": backends(config, embed_model),
        "llm": llm_state(recent[0] if recent else None) if config.completer.backend == "openai"
        else "none: the extractive backend works offline",
        "backlog": {**backlog.as_dict(), "turns_since_last_pass": unfolded},
        # What the next pass would start from: computed from this backlog, not stored.
        "drives": drv.levels(backlog, config, now).as_dict(),
        "runs": recent,
        "failures": [f.__dict__ for f in fails if not f.quarantined],
        "quarantined": [f.__dict__ for f in fails if f.quarantined],
        "forget": forget,
        # Rows the extractive fallback made where the model's answers were rejected.
        "fallback": {"rows": fell_back, "retry_hours": config.jobs.fallback_retry_hours,
                     "on": config.jobs.fallback},
        "last_pass_changes": changes(diary_run, diary),
    }


def changes(run_id: int | None, diary: list[DiaryLine]) -> dict[str, Any] | None:
    """The dream diary of the last pass that changed something: per user, the facts it
    added and replaced, the corrections it honoured, the profile's lines added and
    dropped, the gists it wrote (with ids)."""
    if run_id is None:
        return None
    users: dict[str, dict[str, list[Any]]] = {}
    for line in diary:
        mine = users.setdefault(line.user_id, {
            "facts_added": [], "facts_replaced": [], "honoured": [], "profile_added": [],
            "profile_dropped": [], "gists": []})
        if line.kind in ("profile_added", "profile_dropped"):
            mine[line.kind] += line.detail.get("lines", [])
        elif line.kind == "gist":
            mine["gists"].append(line.detail.get("session"))
        else:
            mine[_DIARY_KEYS.get(line.kind, line.kind)].append(line.detail)
    return {"run": run_id, "users": users}


_DIARY_KEYS = {"fact_added": "facts_added", "fact_replaced": "facts_replaced"}


def before_first_pass(store: Store) -> dict[str, Any]:
    """All `status` can say of a file dreamd has not set up: what waits for it."""
    with store.read() as conn:
        turns, sessions = raw_counts(conn)
    return {"db": store.where, store.engine: store.engine_info(), "dreamd_has_run": False,
            "turns": turns, "sessions": sessions}


def backends(config: Config, embed_model: str) -> dict[str, str]:
    """Which backends a pass would use, in words (never a key)."""
    c = config.completer
    completer = ("extractive (offline, no LLM)" if c.backend == "extractive"
                 else f"openai-compatible: {c.model} at {shown(server_url(c.base_url))}")
    where = "offline" if config.embed.backend != "openai" else "remote"
    return {"completer": completer, "embedder": f"{embed_model} ({where})"}


def llm_state(run: dict[str, Any] | None) -> str:
    """How LLM work went in the last pass: ok, degraded, stopped (configuration) or
    paused (budget), with the cause in the server's or the network's words."""
    notes = [n for n in (run or {}).get("notes") or [] if n.startswith("LLM work stopped")]
    for marker, state in (("BreakerOpen", "degraded"), ("BackendMisconfigured", "stopped"),
                          ("BudgetExhausted", "paused")):
        for note in notes:
            if marker in note:
                return f"{state}: {note.split(f'{marker}: ', 1)[-1]}"
    return "ok"


def memory(store: Store, config: Config, gists: int = 5, user: str | None = None
           ) -> dict[str, Any]:
    """The derived memory for one user (default: the configured one) and the agent."""
    named, user = user is not None, user or config.user.id
    with store.read() as conn:
        if named:
            require_user(conn, user)
        all_gists = gists_for_user(conn, user)
        profile = profile_row(conn, profile_id(user))
        eras = eras_for_user(conn, user)
        narrative = narrative_row(conn, narrative_id(user))
        state = self_state(conn, self_state_id(config.agent.id, user))
        made_by = tier_sources(conn, user, profile_id(user), narrative_id(user))
    latest = sorted(all_gists, key=lambda g: g.last_exchange_id)[-gists:]
    return {
        "user": user,
        "gists": {"count": len(all_gists),
                  "latest": [{"session": g.session_id, "month": g.month, "content": g.content,
                              "made_by": made_by.get(("gist", g.session_id))}
                             for g in latest]},
        "profile": profile.content if profile else None,
        "profile_source": made_by.get(("profile", profile_id(user))),
        "eras": [{"month": m, "content": c, "made_by": made_by.get(("era", m))}
                 for m, c, _ in eras],
        "narrative": narrative.content if narrative else None,
        "narrative_source": made_by.get(("narrative", narrative_id(user))),
        "self_state": state[0] if state else None,
    }


def diary_lines(diary: dict[str, Any] | None) -> list[str]:
    """The dream diary of the last pass that changed something, per user: what it did to
    the facts, the corrections it kept, the gists it wrote, and the profile as a diff."""
    if not diary:
        return []
    out = ["", f"what changed in the last pass (pass {diary['run']}):"]
    for user, c in diary["users"].items():
        said = []
        if c["facts_added"]:
            said.append(f"{_count(len(c['facts_added']), 'fact')} added ("
                        + " ".join(f"#{d['fact']}" for d in c["facts_added"][:8])
                        + (" …" if len(c["facts_added"]) > 8 else "") + ")")
        if c["facts_replaced"]:
            said.append(f"{len(c['facts_replaced'])} replaced (" + ", ".join(
                f"#{d['fact']} by #{d['by']}" for d in c["facts_replaced"][:5]) + ")")
        if c["honoured"]:
            said.append(f"{_count(len(c['honoured']), 'correction')} kept (" + ", ".join(
                _honoured(d) for d in c["honoured"][:5]) + ")")
        if c["gists"]:
            said.append(f"{_count(len(c['gists']), 'gist')} written")
        out.append(f"  {user}: " + ("; ".join(said) or "the profile changed"))
        if c["profile_added"] or c["profile_dropped"]:
            out.append("    profile:")
            out += [f"    - {line.removeprefix('- ')}" for line in c["profile_dropped"]]
            out += [f"    + {line.removeprefix('- ')}" for line in c["profile_added"]]
    return out


def _honoured(detail: dict[str, Any]) -> str:
    if "correction" in detail:
        return f"#{detail['correction']} {detail['action']} of fact #{detail['fact']}"
    return f"fact #{detail['fact']} not made again from turn {detail['turn']}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")

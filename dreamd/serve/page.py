"""The page at /: server-rendered HTML with an SVG chart, no script (the server's policy
forbids any), readable with JavaScript off. Every text that came from a turn, a model or
the store is escaped where it is written."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

from dreamd.config import Config
from dreamd.dream.jobs.registry import JOBS
from dreamd.models import DRIVE_NAMES
from dreamd.report import diary_lines

RUNS = 30  # passes on the chart
SESSION_TURNS = 2000  # turns shown of one session
COLOURS = {"continuity": "#2563eb", "coherence": "#16a34a", "curiosity": "#d97706",
           "stability": "#7c3aed"}
DRIVE_OF = {spec.name: spec.drive for spec in JOBS}

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 62rem;
       padding: 1rem 1.5rem 3rem; color: #1f2937; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
a { color: #1d4ed8; } table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #e5e7eb;
         vertical-align: top; }
.note { background: #fef3c7; padding: .5rem .8rem; border-radius: .3rem; }
.muted { color: #6b7280; } .old { color: #6b7280; text-decoration: line-through; }
pre { white-space: pre-wrap; background: #f9fafb; padding: .6rem .8rem;
      border-radius: .3rem; font: inherit; }
ol.timeline { list-style: none; padding-left: 0; } ol.timeline li { margin: .4rem 0; }
.turn { padding: .3rem .6rem; border-left: 3px solid #e5e7eb; margin: .3rem 0; }
.turn:target { border-left-color: #d97706; background: #fffbeb; }
.legend span { margin-right: 1.2rem; white-space: nowrap; }
details { display: inline-block; margin-left: .3rem; }
details summary { color: #6b7280; cursor: pointer; font-size: .9em; }
details[open] { display: block; margin: .2rem 0 .5rem 1rem; }
details form { margin: .3rem .4rem .3rem 0; display: inline-block; }
"""


def _layout(title: str, body: str, note: str | None) -> str:
    warning = f'<p class="note">{escape(note)}</p>' if note else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)} · dreamd</title><style>{STYLE}</style></head><body>"
            f'<p><a href="/">dreamd</a></p>{warning}{body}</body></html>')


def _user_link(user: str) -> str:
    return f'<a href="/users/{quote(user, safe="")}">{escape(user)}</a>'


USERS_SHOWN = 25  # users on a page of the index


def index(listing: dict[str, Any], state: dict[str, Any], config: Config,
          note: str | None) -> str:
    users = listing["users"]
    rows = "".join(f"<tr><td>{_user_link(u)}</td><td>{t['sessions']}</td><td>{t['turns']}"
                   f"</td><td>{t['backlog']}</td></tr>" for u, t in users.items())
    table = (f"<table><tr><th>user</th><th>sessions</th><th>turns</th>"
             f"<th>not yet in a gist</th></tr>{rows}</table>" if users
             else '<p class="muted">No users yet.</p>')
    if listing.get("next"):
        table += (f'<p><a href="/?after={quote(listing["next"], safe="")}">'
                  f"next {USERS_SHOWN} users</a></p>")
    runs = list(reversed(state.get("runs") or []))
    # The chart first: a file of many users would push it out of sight.
    return _layout("memory", (
        f"<h1>What dreamd dreamed</h1><p class=\"muted\">{escape(str(state['db']))}</p>"
        f"<h2>Drives over the last passes</h2>{chart(runs, config)}"
        f"{_diary(state.get('last_pass_changes'))}"
        f"<h2>Users</h2>{table}{_passes(runs)}"), note)


def _diary(diary: dict[str, Any] | None) -> str:
    """What the last pass that changed anything changed, as `dreamd status` says it."""
    lines = diary_lines(diary)
    if not lines:
        return ""
    return (f"<h2>{escape(lines[1].rstrip(':').capitalize())}</h2>"
            f"<pre>{escape(chr(10).join(line[2:] for line in lines[2:]))}</pre>")


def chart(runs: list[dict[str, Any]], config: Config) -> str:
    """Each drive's level at the start of each pass (what decided it), its threshold as
    a dashed line, and a mark under the pass for each job that ran, with its reason."""
    if not runs:
        return '<p class="muted">No pass has run yet.</p>'
    most = max(sum(1 for j in r.get("jobs") or [] if j.get("ran")) for r in runs)
    width, left, top, plot = 760, 40, 10, 170
    height = top + plot + 12 + 7 * most + 16  # room for a mark per job under each pass
    step = (width - left - 20) / max(1, len(runs) - 1) if len(runs) > 1 else 0
    x = [left + (i * step if len(runs) > 1 else (width - left) / 2) for i in range(len(runs))]

    def y(level: float) -> float:
        return top + plot * (1 - max(0.0, min(1.0, level)))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="100%" role="img" aria-label="drive levels over the last passes">',
             f'<rect x="{left}" y="{top}" width="{width - left - 10}" height="{plot}" '
             'fill="#f9fafb"/>']
    for level in (0, 0.5, 1):
        parts.append(f'<text x="{left - 6}" y="{y(level) + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#6b7280">{level:g}</text>')
    for drive in DRIVE_NAMES:
        colour = COLOURS[drive]
        threshold = getattr(config.drives, f"{drive}_threshold", None)
        if threshold is not None:
            parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(threshold):.1f}" '
                         f'y2="{y(threshold):.1f}" stroke="{colour}" stroke-dasharray="5 4" '
                         f'stroke-opacity=".7"><title>{drive} threshold {threshold:g}'
                         f'</title></line>')
        points = [(x[i], y(float((r.get("drives_before") or {}).get(drive, 0))))
                  for i, r in enumerate(runs)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in points) + '"/>')
        for (a, b), run in zip(points, runs, strict=True):
            level = (run.get("drives_before") or {}).get(drive, 0)
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}">'
                         f'<title>pass {run["id"]}: {drive} {level}</title></circle>')
    for i, run in enumerate(runs):
        ran = [j for j in run.get("jobs") or [] if j.get("ran")]
        for n, job in enumerate(ran):
            colour = COLOURS.get(DRIVE_OF.get(job["job"], ""), "#374151")
            mark_y = top + plot + 12 + n * 7
            parts.append(f'<rect class="ran" x="{x[i] - 3:.1f}" y="{mark_y}" width="6" '
                         f'height="5" fill="{colour}"><title>pass {run["id"]}: '
                         f'{escape(job["job"])} ran: {escape(str(job.get("reason", "")))}'
                         f'</title></rect>')
        if len(runs) <= 12 or i % max(1, len(runs) // 12) == 0:
            parts.append(f'<text x="{x[i]:.1f}" y="{height - 4}" font-size="10" '
                         f'text-anchor="middle" fill="#6b7280">#{run["id"]}</text>')
    parts.append("</svg>")
    legend = "".join(f'<span style="color:{COLOURS[d]}">━ {d}</span>' for d in DRIVE_NAMES)
    return (f'<div class="legend">{legend}<span class="muted">- - - threshold · ▪ a job '
            f"ran (its drive's colour)</span></div>" + "".join(parts))


def _passes(runs: list[dict[str, Any]]) -> str:
    rows = []
    for run in reversed(runs):
        jobs = "<br>".join(f"<b>{escape(j['job'])}</b>: {escape(str(j.get('reason', '')))}"
                           for j in run.get("jobs") or [] if j.get("ran"))
        rows.append(f"<tr><td>#{run['id']}</td><td>{escape(str(run.get('started_at'))[:19])}"
                    f"</td><td>{escape(str(run.get('trigger')))}</td>"
                    f"<td>{escape(str(run.get('outcome')))}</td>"
                    f"<td>{jobs or '<span class=muted>nothing ran</span>'}</td></tr>")
    return ("<h2>Why it dreamed</h2><table><tr><th>pass</th><th>started (UTC)</th>"
            "<th>trigger</th><th>outcome</th><th>jobs that ran, and why</th></tr>"
            + "".join(rows) + "</table>")


def user(data: dict[str, Any], note: str | None, csrf: str | None = None) -> str:
    """A user's memory; with `csrf` (a reader who may write), each fact with forms to
    correct, pin or unpin it, links to retract it and to its history, and a form to add one."""
    name = data["user"]
    sections = [f"<h1>{escape(name)}</h1>",
                "<h2>Profile</h2>" + _profile(data.get("profile"), data["facts"]),
                "<h2>Facts</h2>" + _facts(name, data["facts"], csrf)
                + (_withdrawn(name, data.get("withdrawn") or []))
                + (_adding(name, csrf) if csrf else ""),
                "<h2>Lately</h2>" + _text(data.get("narrative")),
                "<h2>Eras</h2>" + ("".join(
                    f"<h3>{escape(e['month'])}</h3>{_text(e['content'])}"
                    for e in data["eras"]) or '<p class="muted">None yet.</p>'),
                "<h2>The agent with this user</h2>" + _state(data.get("self_state")),
                "<h2>Latest conversations</h2>" + ("".join(
                    f"<h3>{_session_link(name, g['session'])}</h3>{_text(g['content'])}"
                    for g in reversed(data["gists"]["latest"]))
                    or '<p class="muted">None yet.</p>')]
    return _layout(name, "".join(sections), note)


def _profile(text: str | None, facts: list[dict[str, Any]]) -> str:
    """The profile, each line that says a current fact linked to it (to change it)."""
    if not text:
        return '<p class="muted">None yet.</p>'
    said = {f["statement"]: f["id"] for f in facts if f["current"]}
    lines = []
    for line in text.splitlines():
        fact = said.get(line.removeprefix("- ").strip())
        lines.append(escape(line) + (f' <a class="muted" href="#fact-{fact}">change</a>'
                                     if fact is not None else ""))
    return f'<pre>{"<br>".join(lines)}</pre>'


def _facts(name: str, facts: list[dict[str, Any]], csrf: str | None) -> str:
    """Newest first; a replaced fact struck through, with the day it stopped holding."""
    if not facts:
        return '<p class="muted">None yet.</p>'
    items = []
    for f in sorted(facts, key=lambda f: (f["since"] or f["learned_at"], f["id"]),
                    reverse=True):
        day = escape((f["since"] or f["learned_at"] or "")[:10])
        held = (f'<span class="muted">since {day}</span>' if f["current"] else
                f'<span class="muted">{day} – {escape((f["until"] or "")[:10])}, replaced '
                f"by #{f['replaced_by']}</span>")
        sources = ", ".join(
            f'<a class="source" href="{_user_path(name)}/sessions/'
            f'{quote(t["session"] or "", safe="")}#turn-{t["id"]}">turn {t["id"]}</a>'
            for t in f["from_turns"] if t["session"] is not None)
        statement = escape(f["statement"])
        pin = " <b>pinned</b>" if f.get("pinned") else ""
        change = _changing(name, f, csrf) if csrf and f["current"] else ""
        items.append(f'<li id="fact-{f["id"]}"><span class="{"" if f["current"] else "old"}">'
                     f"{statement}</span>{pin} {held}"
                     f'{f" · from {sources}" if sources else ""}{change}</li>')
    return f'<ol class="timeline">{"".join(items)}</ol>'


def _user_path(name: str) -> str:
    return f"/users/{quote(name, safe='')}"


def _hidden(csrf: str, version: int | None = None) -> str:
    kept = f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
    return kept + (f'<input type="hidden" name="version" value="{version}">'
                   if version is not None else "")


def _changing(name: str, f: dict[str, Any], csrf: str) -> str:
    """A fact's forms: plain HTML, posted to this server (no script runs here)."""
    at = f"{_user_path(name)}/facts/{f['id']}"
    pin = "unpin" if f.get("pinned") else "pin"
    return (f'<details><summary>change</summary>'
            f'<form method="post" action="{at}/correct">{_hidden(csrf, f["version"])}'
            f'<input name="statement" value="{escape(f["statement"])}" size="60" '
            f'maxlength="300" required aria-label="new words"> '
            f'<input name="why" placeholder="why (optional)" maxlength="500" '
            f'aria-label="why"> <button>Correct</button></form>'
            f'<form method="post" action="{at}/{pin}">{_hidden(csrf, f["version"])}'
            f"<button>{pin.capitalize()}</button></form> "
            f'<a href="{at}/retract">Retract…</a> · <a href="{at}/history">History</a>'
            f"</details>")


def _withdrawn(name: str, facts: list[dict[str, Any]]) -> str:
    if not facts:
        return ""
    items = "".join(
        f'<li id="fact-{f["id"]}"><span class="old">{escape(f["statement"])}</span> '
        f'<span class="muted">{escape(f["withdrawn"] or "")} by a person</span> · '
        f'<a href="{_user_path(name)}/facts/{f["id"]}/history">history</a></li>'
        for f in facts)
    return f'<h3>Withdrawn by a person</h3><ol class="timeline">{items}</ol>'


def _adding(name: str, csrf: str) -> str:
    return (f'<h3>Add a fact</h3><form method="post" action="{_user_path(name)}/facts">'
            f'{_hidden(csrf)}<input name="statement" size="60" maxlength="300" required '
            f'aria-label="the fact"> <input name="why" placeholder="why (optional)" '
            f'maxlength="500" aria-label="why"> <button>Add</button></form>')


def retracting(name: str, fact: dict[str, Any], csrf: str, note: str | None) -> str:
    """The confirmation a retraction asks for."""
    at = f"{_user_path(name)}/facts/{fact['id']}"
    return _layout("retract", (
        f"<h1>Retract this fact?</h1><p><b>{escape(fact['statement'])}</b></p>"
        "<p>It leaves the profile, the eras, the narrative and every context block, and "
        "no pass makes it again from what was said so far. Its history keeps it, and the "
        "retraction can be reverted there.</p>"
        f'<form method="post" action="{at}/retract">{_hidden(csrf, fact["version"])}'
        f'<input name="why" placeholder="why (optional)" maxlength="500" aria-label="why"> '
        f'<button>Retract</button></form><p><a href="{_user_path(name)}#fact-{fact["id"]}">'
        "Keep it</a></p>"), note)


def history(name: str, fact_id: int, rows: list[dict[str, Any]], csrf: str | None,
            note: str | None) -> str:
    """A fact's corrections, oldest first, each but a revert with a form to undo it."""
    items = []
    for c in rows:
        words = " → ".join(escape(w) for w in (c["old"], c["new"]) if w)
        undo = (f'<form method="post" action="{_user_path(name)}/corrections/{c["id"]}/'
                f'revert">{_hidden(csrf)}<button>Revert</button></form>'
                if csrf and c["action"] != "revert" and c["reverted_by"] is None else "")
        items.append(f"<tr><td>#{c['id']}</td><td>{escape(c['made_at'][:16])}</td>"
                     f"<td>{escape(c['made_by'])}</td><td>{escape(c['action'])}</td>"
                     f"<td>{words}</td><td>{escape(c['why'] or '')}</td><td>{undo}</td></tr>")
    table = ("<table><tr><th>#</th><th>when</th><th>who</th><th>what</th><th>words</th>"
             f"<th>why</th><th></th></tr>{''.join(items)}</table>" if items
             else '<p class="muted">No correction of this fact yet.</p>')
    return _layout(f"fact {fact_id}", f"<h1>History of fact #{fact_id}</h1>"
                   f"<p>{_user_link(name)}</p>{table}", note)


def refused(message: str, back: str, note: str | None, heading: str = "Not changed") -> str:
    """What the page could not do (a change, or a page to show), in one line, and the way
    back."""
    return _layout(heading.lower(), f"<h1>{escape(heading)}</h1><p>{escape(message)}</p>"
                   f'<p><a href="{escape(back)}">Back</a></p>', note)


def _state(state: dict[str, Any] | None) -> str:
    if not state:
        return '<p class="muted">None yet.</p>'
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(_plain(v))}</td></tr>"
                   for k, v in state.items() if k != "dreamd")
    return f"<table>{rows}</table>"


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(_plain(v) for v in value)
    return str(value)


def _text(text: str | None) -> str:
    return f"<pre>{escape(text)}</pre>" if text else '<p class="muted">None yet.</p>'


def _session_link(name: str, session: str) -> str:
    return (f'<a href="/users/{quote(name, safe="")}/sessions/{quote(session, safe="")}">'
            f"{escape(session)}</a>")


def session(name: str, session_id: str, turns: list[dict[str, Any]], note: str | None) -> str:
    shown = "".join(
        f'<div class="turn" id="turn-{t["id"]}"><span class="muted">#{t["id"]} · '
        f'{escape(t["created_at"][:16])} · {escape(t["role"])}</span><br>'
        f'{escape(t["content"])}</div>' for t in turns)
    return _layout(session_id, f'<h1>{escape(session_id)}</h1><p>{_user_link(name)}</p>'
                   + (shown or '<p class="muted">No turns.</p>'), note)

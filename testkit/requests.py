"""The requests dreamd sends, rendered for the project's own conversations: what the
answer corpora (tests/data/answers_*.txt) answer, and what the guards are judged on.

Three sets of conversations the project ships: the demo's sample (Sam), the second sample
(Jonah) and the LoCoMo-shaped fixture (Sam and Rui, speakers named). Every prompt kind is
rendered with dreamd's own builders, as its jobs build them: a gist per session (and, for a
few long sessions, two partial gists and their merge), a facts request per session, the
digest of each month, the profile and the narrative (from the corpus's own gists and
digests: a tier's request is rendered from the answers below it) and a reflection.

    python -m testkit.requests [ID ...]     # print the requests (all, or the ones named)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dreamd.cli.demo import parse_samples
from dreamd.config import Config
from dreamd.dream.jobs.facts_asked import NOT_PEOPLE, PER_TURN
from dreamd.dream.prompts import (
    era_lines,
    era_prompt,
    facts_prompt,
    merge_prompt,
    narrative_prompt,
    profile_prompt,
    reflect_prompt,
    summary_prompt,
    turn_line,
)
from dreamd.models import Prompt
from dreamd.text.dates import day_of, long_date

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CONFIG = Config()
AGENT = "Wren"
# Sessions long enough to be summarized in two parts whose gists are merged.
SPLIT = ("sample/s06", "sample/s09", "second/t04", "second/t07")


@dataclass(frozen=True)
class Session:
    key: str  # "sample/s01"
    turns: tuple[tuple[str, str, str], ...]  # (role, content, created_at)

    @property
    def month(self) -> str:
        return self.turns[0][2][:7]


@dataclass(frozen=True)
class Chat:
    """One set of conversations: whose, and its sessions in order."""

    name: str
    names: dict[str, str]
    sessions: tuple[Session, ...]


def samples(name: str, path: Path, user: str) -> Chat:
    sessions = parse_samples(path.read_text("utf-8"))
    return Chat(name, {"user": user, "agent": AGENT},
                tuple(Session(f"{name}/{s.session_id}", s.turns) for s in sessions))


def locomo(path: Path) -> Chat:
    """The LoCoMo-shaped fixture as dreamd imports it: the speakers' names are the roles."""
    conv = json.loads(path.read_text("utf-8"))[0]["conversation"]
    sessions = []
    n = 1
    while f"session_{n}" in conv:
        start = datetime.strptime(conv[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
        turns = []
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares an image: {turn['blip_caption']}]"
            turns.append((turn["speaker"], text,
                          (start + timedelta(minutes=i)).isoformat() + "+00:00"))
        sessions.append(Session(f"locomo/{n}", tuple(turns)))
        n += 1
    return Chat("locomo", {"user": conv["speaker_a"], "agent": conv["speaker_b"]},
                tuple(sessions))


def chats() -> list[Chat]:
    return [samples("sample", ROOT / "dreamd" / "data" / "sample_conversations.txt", "Sam"),
            samples("second", DATA / "second_sample.txt", "Jonah"),
            locomo(DATA / "locomo_sample.json")]


def said(session: Session) -> list[str]:
    return [turn_line(role, content) for role, content, _ in session.turns]


def said_at(session: Session) -> list[str]:
    return [at for _, _, at in session.turns]


def facts_lines(chat: Chat, session: Session, first_id: int) -> list[str]:
    """The facts job's turn lines: "[id] Sunday 7 May 2023. Sam: text", people only."""
    out = []
    for i, (role, content, at) in enumerate(session.turns):
        if role.lower() in NOT_PEOPLE:
            continue
        who = chat.names["user"] if role == "user" else role
        day = day_of(at)
        out.append(f"[{first_id + i}] {long_date(day) + '. ' if day else ''}{who}: {content}")
    return out


def gist_requests(chat: Chat) -> Iterator[tuple[str, Prompt]]:
    lines = CONFIG.summarize.gist_lines
    for session in chat.sessions:
        turns, times = said(session), said_at(session)
        if session.key in SPLIT:
            half = len(turns) // 2
            yield f"{session.key}#1", summary_prompt(chat.names, None, turns[:half], lines,
                                                     said_at=times[:half])
            yield f"{session.key}#2", summary_prompt(chat.names, None, turns[half:], lines,
                                                     said_at=times[half:])
        else:
            yield session.key, summary_prompt(chat.names, None, turns, lines, said_at=times)


def gist_of(session: Session, answers: dict[str, str]) -> str | None:
    return answers.get(f"{session.key}/merge" if session.key in SPLIT else session.key)


def requests(answers: dict[str, str]) -> dict[str, Prompt]:
    """Every request, by id; the tiers' requests where the answers below them exist."""
    out: dict[str, Prompt] = {}
    for chat in chats():
        names, first_id = chat.names, 1
        for key, prompt in gist_requests(chat):
            out[key] = prompt
        for session in chat.sessions:
            if session.key in SPLIT and f"{session.key}#1" in answers and \
                    f"{session.key}#2" in answers:
                out[f"{session.key}/merge"] = merge_prompt(names, [
                    answers[f"{session.key}#1"], answers[f"{session.key}#2"]],
                    CONFIG.summarize.gist_lines)
            out[f"{session.key}/facts"] = facts_prompt(
                names, facts_lines(chat, session, first_id), known=[], per_turn=PER_TURN)
            first_id += len(session.turns)
        user_turns = [turn_line(r, c) for s in chat.sessions for r, c, _ in s.turns
                      if r in ("user", names["user"])]
        last = chat.sessions[-1].turns[-1][2]
        out[f"{chat.name}/reflect"] = reflect_prompt(
            names, {}, user_turns[-200:],
            {"new_turns": len(user_turns), "sessions": len(chat.sessions), "now": last})
        out.update(tier_requests(chat, answers))
    # What a 135M model was given when it wrote the answers tests/test_validate.py keeps.
    out["fixture/small"] = summary_prompt({"user": "Mia", "agent": "Leo"}, None, [
        "user: Hey Leo! So, I started a new job at the animal shelter last week.",
        "assistant: Absolutely! That sounds wonderful, how are the dogs settling in?",
        "user: Pretty well, the new house has a big yard so they can explore."], 8)
    return out


def tier_requests(chat: Chat, answers: dict[str, str]) -> dict[str, Prompt]:
    """The digests of each month, the profile and the narrative, from the corpus's own
    gists (and digests): rendered once every gist they read is answered."""
    gists = {s.key: gist_of(s, answers) for s in chat.sessions}
    if any(g is None for g in gists.values()):
        return {}
    out: dict[str, Prompt] = {}
    months: dict[str, list[str]] = {}
    for session in chat.sessions:
        months.setdefault(session.month, []).extend(
            ln for ln in str(gists[session.key]).splitlines() if ln.strip())
    for month, lines in months.items():
        out[f"{chat.name}/era/{month}"] = era_prompt(chat.names, month, lines,
                                                     CONFIG.eras.lines)
    every = [ln for g in gists.values() for ln in str(g).splitlines() if ln.strip()]
    out[f"{chat.name}/profile"] = profile_prompt(chat.names, None, every,
                                                 CONFIG.profile.max_facts, "user")
    eras = [(m, f"{m}: {n} conversations.\n{answers[f'{chat.name}/era/{m}']}")
            for m, n in sorted(sessions_by_month(chat).items())
            if f"{chat.name}/era/{m}" in answers]
    profile = answers.get(f"{chat.name}/profile")
    if profile is not None and len(eras) == len(months):
        out[f"{chat.name}/narrative"] = narrative_prompt(
            chat.names, profile, [], CONFIG.narrative.lines, None, era_lines(eras))
    return out


def sessions_by_month(chat: Chat) -> dict[str, int]:
    counts: dict[str, int] = {}
    for session in chat.sessions:
        counts[session.month] = counts.get(session.month, 0) + 1
    return counts


def read_answers(path: Path) -> dict[str, str]:
    """An answers file: "## id" on a line, then the answer as the model gave it, up to
    the next "## " line (blank lines at either end are not the answer's)."""
    out: dict[str, str] = {}
    key: str | None = None
    lines: list[str] = []
    for line in [*path.read_text("utf-8").splitlines(), "## end"]:
        if line.startswith("## "):
            if key is not None:
                out[key] = "\n".join(lines).strip("\n")
            key, lines = line[3:].strip(), []
        elif key is not None:
            lines.append(line)
    out.pop("end", None)
    return out


def main() -> None:
    answers = read_answers(DATA / "answers_good.txt") if (DATA / "answers_good.txt").exists() \
        else {}
    wanted = sys.argv[1:]
    for key, prompt in requests(answers).items():
        if wanted and not any(key.startswith(w) for w in wanted):
            continue
        print(f"=== {key} ({prompt.task})\n--- system\n{prompt.system}\n--- user\n{prompt.user}\n")


if __name__ == "__main__":
    main()

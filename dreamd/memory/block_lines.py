"""How the context block shows each tier within its share of tokens: a gist's lines (the
ones the question is about), an era's points, the self-state's lines."""

from __future__ import annotations

import re

import numpy as np

from dreamd.backends.llm_output import estimate_tokens
from dreamd.memory.recall import top_k

GIST_CHARS = 320  # of a gist in the context block: its opening lines
# ... and at most these tokens, so that one fits in what a 1,000-token block gives the
# gists (9 %): a gist told in the third person, with quotes and dates, has more of them
# to a character than turns kept verbatim.
GIST_TOKENS = 80
# An era's point likewise fits in what a 1,000-token block gives the eras (4 %).
ERA_TOKENS = 34


def gist_shown(lines: list[str], asked: list[str]) -> str:
    """A gist as the context block shows it, within GIST_TOKENS: its opening line (the
    About line, where it has one), then the lines that share the most of the query's
    topic words `asked`, in the order said; with none in common, its opening lines. A
    gist is a whole session, and the block shows a few of its lines: the ones the
    question is about, not the ones said first."""
    def said(line: str) -> int:
        return sum(any(_same_word(w, a) for a in asked) for w in set(_WORD.findall(line.lower())))

    def text(picked: set[int]) -> str:
        shown = " / ".join(lines[i] for i in sorted(picked))
        return shown + " …" if len(picked) < len(lines) else shown

    scores = [said(line) for line in lines]
    if len(lines) < 3 or not any(scores[1:]):
        return _within_tokens(" / ".join(lines))
    picked = {0}
    for i in sorted(range(1, len(lines)), key=lambda i: (-scores[i], i)):
        wider = text(picked | {i})
        if len(wider) <= GIST_CHARS and estimate_tokens(wider) <= GIST_TOKENS:
            picked.add(i)
    if picked == {0}:  # the line asked about is long: it is shown cut, after the opening
        best = max(range(1, len(lines)), key=lambda i: (scores[i], -i))
        return _within_tokens(f"{lines[0]} / {lines[best]}")
    return text(picked)


_WORD = re.compile(r"[a-z0-9]+")


def _same_word(word: str, asked: str) -> bool:
    """Whether a gist's word is one of the query's, give or take its ending ("gift",
    "gifts"; "company", "companies")."""
    if word == asked:
        return True
    short, longer = sorted((word, asked), key=len)
    return len(short) >= 4 and (longer.startswith(short) or (
        len(short) >= 5 and short[:5] == longer[:5]))


def _within_tokens(text: str, tokens: int = GIST_TOKENS, chars: int = GIST_CHARS) -> str:
    """`text` shortened to `chars`, and further until it is `tokens` at most."""
    limit = chars
    cut = _shortened(text, limit)
    while estimate_tokens(cut) > tokens and limit > 40:
        limit = limit * 9 // 10
        cut = _shortened(text, limit)
    return cut


def _shortened(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a line or word boundary, marked when cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    at = cut.rfind(" / ")
    cut = cut[:at] if at > limit // 2 else cut[:cut.rfind(" ")]
    return cut.rstrip() + " …"


def tier_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def self_state_lines(state: dict[str, object]) -> list[str]:
    out = []
    if state.get("self_narrative"):
        out.append(str(state["self_narrative"]))
    if state.get("mood"):
        out.append(f"mood: {state['mood']}; energy: {state.get('energy', '?')}")
    drives = state.get("drives")
    if isinstance(drives, dict):
        out.append("drives: " + ", ".join(f"{k} {v}" for k, v in drives.items()))
    return out


def best_era_points(eras: dict[str, str], vectors: dict[str, bytes], query: np.ndarray,
               k: int) -> list[str]:
    months = [m for m in eras if m in vectors]
    if not months:
        return []
    scores = np.stack([np.frombuffer(vectors[m], dtype=np.float32) for m in months]) @ query
    return [_within_tokens(f"{months[i]}: {line}", ERA_TOKENS) for i in top_k(scores, k)
            for line in _era_points(months[i], eras[months[i]])]


def _era_points(month: str, text: str) -> list[str]:
    """An era's points without its own heading ("2026-03: 1 conversation."): the context
    names the month on every point."""
    lines = tier_lines(text)
    if lines and lines[0].startswith(f"{month}:"):
        lines = lines[1:]
    return tier_points("\n".join(lines)) if lines else []


def tier_points(text: str) -> list[str]:
    """The points of a derived tier without its heading line ("Recent arc (...):")."""
    lines = tier_lines(text)
    points = [ln[2:] if ln.startswith("- ") else ln for ln in lines
              if not ln.endswith(":") and not ln.endswith("conversations.")]
    return points or lines

"""The tiered context block a chat app puts in its prompt, within a token budget.

Tiers, in order: the agent's self-state and drives, the user's profile, the facts
nearest the query (with their dates), the narrative, relevant eras, relevant gists of
other sessions, a few sharp raw details, then the current session's recent turns. Every
tier has a share of the budget; what a tier leaves unused goes to the others. Tokens are
counted one way throughout (`estimate_tokens`), and the whole block never exceeds the
budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamd.backends.llm_output import estimate_tokens

# name, heading, share of the budget
TIERS = (
    ("self", "How I am", 0.05),
    ("profile", "About the user", 0.08),
    ("facts", "Facts that may matter", 0.09),
    ("narrative", "Lately", 0.04),
    ("eras", "Back then", 0.04),
    ("gists", "Earlier conversations", 0.09),
    ("details", "Details that may matter", 0.26),
    ("recent", "This conversation", 0.35),
)


@dataclass(frozen=True)
class Context:
    text: str
    tokens: int
    sections: tuple[tuple[str, tuple[str, ...]], ...]  # (tier, lines kept)


def build(parts: dict[str, list[str]], budget: int) -> Context:
    """Fit each tier's lines (most important first) into the budget, tiers in order.

    `parts["recent"]` is oldest first; the newest turns are kept when space is short.
    """
    want = {name: parts.get(name, []) for name, _, _ in TIERS}
    cost = {name: [estimate_tokens(line) + 1 for line in lines] for name, lines in want.items()}
    # A line costs its tokens plus one for its newline; a heading also pays for the blank
    # line before it. Summed this way the block can only come out at or under budget.
    heading = {name: estimate_tokens(f"## {title}") + 2 for name, title, _ in TIERS}
    allowance = {name: int(budget * share) for name, _, share in TIERS}
    kept: dict[str, list[int]] = {name: [] for name in want}

    def take(name: str, limit: int) -> int:
        """Keep more lines of `name` within `limit` tokens; return tokens used."""
        used = 0
        order = range(len(want[name]) - 1, -1, -1) if name == "recent" else range(len(want[name]))
        for i in order:
            if i in kept[name]:
                continue
            extra = cost[name][i] + (0 if kept[name] else heading[name])
            if used + extra > limit:
                break
            kept[name].append(i)
            used += extra
        return used

    spent = sum(take(name, allowance[name]) for name, _, _ in TIERS)
    # What a tier left unused goes to the others, the current conversation first.
    for name in ("recent", "details", "facts", "gists", "profile", "narrative", "eras",
                 "self"):
        spent += take(name, budget - spent)
    return _render(want, kept, budget)


def _render(want: dict[str, list[str]], kept: dict[str, list[int]], budget: int) -> Context:
    lines: list[str] = []
    sections = []
    for name, title, _ in TIERS:
        body = [want[name][i] for i in sorted(kept[name])]
        if name in GROUPED:
            body = _without_empty_groups(body)
        if not body:
            continue
        if lines:
            lines.append("")
        lines.append(f"## {title}")
        lines.extend(body)
        sections.append((name, tuple(body)))
    text = "\n".join(lines)
    tokens = estimate_tokens(text) if text else 0
    if tokens > budget:
        raise AssertionError(f"context of {tokens} tokens over its budget of {budget}")
    return Context(text, tokens, tuple(sections))


GROUPED = ("profile",)  # tiers whose lines fall under headings ("Home:")


def _without_empty_groups(lines: list[str]) -> list[str]:
    """A group's heading only with a point of the group after it: a budget that kept
    "Home:" but none of its points keeps neither. A person's heading ("About Ana:", when
    the profile is of several people) heads groups: it stays while one of them does."""
    kept = []
    for i, line in enumerate(lines):
        if not line.endswith(":"):
            kept.append(line)
            continue
        person = line.startswith("About ")
        for after in lines[i + 1:]:
            if not after.endswith(":"):  # a point: this heading's, or a subgroup's
                kept.append(line)
                break
            if not person or after.startswith("About "):
                break  # the next group (or person) begins with nothing said
    return kept

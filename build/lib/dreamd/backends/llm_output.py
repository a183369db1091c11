"""Cleaning what an LLM returns: pure functions, no SDK."""

from __future__ import annotations

import re

from dreamd.errors import OutputInvalid

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"^\s*<think>.*", re.DOTALL | re.IGNORECASE)
_PREAMBLE = re.compile(
    r"^\s*(sure|certainly|of course|okay|ok|here(?:'s| is| are)|below is)\b[^\n]{0,120}?:\s*\n",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)

MAX_CHARS = {"summarize": 4000, "merge": 4000, "profile": 4000, "era": 3000,
             "narrative": 3000, "reflect": 6000}


def estimate_tokens(text: str) -> int:
    """About four characters a token for English; used where a server reports no usage."""
    return max(1, (len(text) + 3) // 4)


def clean(text: str | None, task: str) -> str:
    """Strip reasoning blocks, chatty preambles and code fences; bound the length."""
    text = _THINK.sub("", text or "")
    if "</think>" not in text.lower():
        text = _UNCLOSED_THINK.sub("", text)
    text = _PREAMBLE.sub("", text, count=1)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    text = text.strip()
    if not text:
        raise OutputInvalid(f"empty {task} output")
    return bounded(text, task)


def bounded(text: str, task: str) -> str:
    """`text` within its tier's bound, cut at the last line or sentence end that keeps at
    least half of it (else at a word), whatever produced it. Reflections are JSON and
    are bounded field by field when validated instead."""
    limit = MAX_CHARS.get(task, 4000)
    if task == "reflect" or len(text) <= limit:
        return text
    cut = text[:limit]
    end = max(cut.rfind("\n"), cut.rfind(". "))
    if end <= limit // 2:
        end = cut.rfind(" ")
    return (cut[: end + 1] if end > limit // 2 else cut).strip()

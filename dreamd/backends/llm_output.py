"""Cleaning what an LLM returns: pure functions, no SDK."""

from __future__ import annotations

import re

from dreamd.errors import OutputInvalid
from dreamd.models import DEFAULT_BOUND, JSON_TASKS

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"^\s*<think>.*", re.DOTALL | re.IGNORECASE)
_PREAMBLE = re.compile(
    r"^\s*(sure|certainly|of course|okay|ok|here(?:'s| is| are)|below is)\b[^\n]{0,120}?:\s*\n",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)
# A data block's tag given back, its digest often garbled ("<data-9636476888c>"): small
# models copy the delimiters around what they write. Stripped, never stored; any other
# markup left is junk (backends.validate).
_DELIMITER = re.compile(r"</?\s*data\b[^<>\n]{0,40}>", re.IGNORECASE)


# How BPE tokenizers cut text, roughly: a run of ASCII letters about one token per five
# letters, every digit one (llama-family tokenizers split numbers into digits), a
# punctuation mark half of one, any other character one. Against SmolLM2's tokenizer
# (bench.small_model --tokens) this is 0.91-1.13 of the real count on conversations
# (LoCoMo, the samples: every prompt kind) where four characters a token was 0.71-1.11
# (facts prompts, full of dates, lowest), and 0.77 on symbol-dense math.
_LETTERS = re.compile(r"[A-Za-z]+")
_ONE_EACH = re.compile(r"[0-9]|[^\x00-\x7f]")
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def estimate_tokens(text: str) -> int:
    """Tokens `text` takes, estimated without the model's tokenizer (see above): for
    fitting prompts to the window, budgets, and where a server reports no usage."""
    letters = sum((len(run) + 4) // 5 for run in _LETTERS.findall(text))
    return max(1, letters + len(_ONE_EACH.findall(text))
               + (len(_PUNCTUATION.findall(text)) + 1) // 2)


def clean(text: str | None, task: str, limit: int = DEFAULT_BOUND) -> str:
    """Strip reasoning blocks, chatty preambles and code fences; bound the length."""
    text = _THINK.sub("", text or "")
    if "</think>" not in text.lower():
        text = _UNCLOSED_THINK.sub("", text)
    text = _DELIMITER.sub("", text)
    text = _PREAMBLE.sub("", text, count=1)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    text = text.strip()
    if not text:
        raise OutputInvalid(f"empty {task} output")
    return bounded(text, limit, task)


def bounded(text: str, limit: int, task: str = "") -> str:
    """`text` within `limit` characters, cut at the last line or sentence end that keeps
    at least half of it (else at a word), whatever produced it. Reflections are JSON and
    are bounded field by field when validated instead."""
    if task in JSON_TASKS or len(text) <= limit:
        return text
    cut = text[:limit]
    end = max(cut.rfind("\n"), cut.rfind(". "))
    if end <= limit // 2:
        end = cut.rfind(" ")
    return (cut[: end + 1] if end > limit // 2 else cut).strip()

"""Whether a model's answer is memory a person would keep: pure checks, no SDK.

A small local model answers with junk that looks like text: a chat template's markers
(`<<SYS>>`), the instructions echoed back, one line looping, or the material copied out
wholesale. None of it may be stored. `junk(answer, prompt)` names the first problem, or
returns None for an answer worth keeping.

Applied to LLM answers only: the extractive backend keeps lines verbatim by design.
Reflections are JSON with their own schema; only the marker and loop checks apply.
"""

from __future__ import annotations

import re
from collections import Counter

from dreamd.models import JSON_TASKS, Prompt

# Chat-template and prompt markers no answer should contain: Llama 2, ChatML, Gemma,
# Mistral/Llama 3 headers, and dreamd's own data delimiters.
MARKERS = re.compile(
    r"<<\s*/?\s*SYS\s*>>|\[/?INST\]|<\|im_(?:start|end)\|>|<\|(?:start|end)_header_id\|>|"
    r"<\|eot_id\|>|<start_of_turn>|<end_of_turn>|</?data(?:-[0-9a-f]{12})?>",
    re.IGNORECASE)

ECHO_SHARE = 0.5  # of the answer's words in runs of 8 that also stand in the instructions
COPY_SHARE = 0.6  # of the answer's lines that stand verbatim in the material
LOOP_LINES = 3  # the same line this many times is a loop
LOOP_SHARE = 0.5  # or: its distinct word-8-grams under this share of all of them


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _grams(words: list[str], n: int = 8) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def echoed(answer: str, instructions: str) -> bool:
    """Most of the answer is the instructions given back (8-word runs in common)."""
    grams = _grams(_words(answer))
    if not grams:
        return False
    theirs = set(_grams(_words(instructions)))
    return sum(g in theirs for g in grams) / len(grams) >= ECHO_SHARE


def looping(answer: str) -> bool:
    """A line repeated again and again, or the same 8-word runs over and over."""
    lines = [ln.strip().lower() for ln in answer.splitlines() if len(ln.strip()) > 10]
    if lines and Counter(lines).most_common(1)[0][1] >= LOOP_LINES:
        return True
    grams = _grams(_words(answer))
    return len(grams) >= 20 and len(set(grams)) / len(grams) < LOOP_SHARE


def copied(answer: str, material: str) -> bool:
    """Most of the answer's lines stand verbatim in the material it was to condense."""
    lines = [ln.strip(" -*•\t") for ln in answer.splitlines()]
    lines = [ln for ln in lines if len(ln) > 20]
    if len(lines) < 3:
        return False
    return sum(ln in material for ln in lines) / len(lines) >= COPY_SHARE


def junk(answer: str, prompt: Prompt) -> str | None:
    """Why `answer` must not become memory, or None when it may."""
    text = answer.strip()
    if not text:
        return "empty answer"
    marker = MARKERS.search(text)
    if marker:
        return f"chat-template or prompt marker {marker.group(0)!r} in the answer"
    if looping(text):
        return "the answer repeats itself in a loop"
    if prompt.task in JSON_TASKS:
        return None  # JSON, validated against its schema by its job
    if echoed(text, prompt.system):
        return "the answer echoes the instructions"
    if copied(text, prompt.user):
        return "the answer copies the material instead of condensing it"
    return None

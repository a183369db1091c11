"""Prompts that fit the model: every request leaves room for its answer.

`completer.context_window` is what one request may hold, prompt and answer together;
`completer.max_output_tokens` of it is kept for the answer. A job whose input does not
fit folds it in: the first chunk that fits goes with the previous version, the answer
becomes the previous version of the next chunk, and so on — the way summarize merges a
long session. A server that still says the input is too long (400
context_length_exceeded) gets the chunk halved and tried again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from dreamd.backends.llm_output import estimate_tokens
from dreamd.dream.jobs.base import JobContext, complete_once
from dreamd.errors import InputRejected
from dreamd.models import Completion, Prompt

# The estimate (llm_output.estimate_tokens) was 0.91 of a real tokenizer's count at
# its lowest on conversations: this spare keeps such a prompt inside the window, so a
# server never cuts the answer short to make room (llama.cpp does, silently).
SPARE = 1.15
OVERHEAD = 16  # the chat template's own tokens around the two messages


def room(ctx: JobContext) -> int | None:
    """Tokens a prompt may take (None: no window, as for the extractive backend)."""
    if not ctx.asking.asks_model:
        return None
    c = ctx.config.completer
    return max(64, int((c.context_window - c.max_output_tokens) / SPARE))


def tokens(prompt: Prompt) -> int:
    return estimate_tokens(prompt.system) + estimate_tokens(prompt.user) + OVERHEAD


def fits(ctx: JobContext, prompt: Prompt) -> bool:
    limit = room(ctx)
    return limit is None or tokens(prompt) <= limit


def largest(ctx: JobContext, build: Callable[[list[str]], Prompt], items: list[str],
            cap: int) -> int:
    """How many of `items` (at least one, at most `cap`) go into a prompt that fits."""
    low, high = 1, min(cap, len(items))
    if fits(ctx, build(items[:high])):
        return high
    while low < high:  # the largest n whose prompt fits; 1 if none does
        mid = (low + high + 1) // 2
        if fits(ctx, build(items[:mid])):
            low = mid
        else:
            high = mid - 1
    return low


def fold(ctx: JobContext, items: list[str], previous: str | None,
         build: Callable[[str | None, list[str]], Prompt],
         read: Callable[[Completion], str]) -> tuple[str | None, int]:
    """Fold `items` into `previous` chunk by chunk, each prompt within the window.
    Returns the result and the number of calls."""
    result, calls, at, cap = previous, 0, 0, len(items)
    while at < len(items):
        n = largest(ctx, functools.partial(build, result), items[at:], cap)
        try:
            completion = ctx.complete(build(result, items[at : at + n]))
        except InputRejected:
            if n == 1:
                raise
            cap = max(1, n // 2)  # the server counts tokens its own way: smaller
            continue
        calls += 1
        result, at = read(completion), at + n
    return result, calls


def answer(ctx: JobContext, items: list[str], previous: str | None,
           build: Callable[[str | None, list[str]], Prompt], cached: tuple[str, str] | None
           ) -> tuple[Completion, str]:
    """One call when everything fits (its answer reused while the inputs are unchanged),
    else `items` folded in parts. Returns the completion and the input hash ("" when
    folded: there is no single input to reuse an answer for)."""
    whole = build(previous, items)
    if fits(ctx, whole):
        try:
            return complete_once(ctx, whole, cached)
        except InputRejected:
            pass  # the server counts tokens its own way: fold in smaller parts
    text, calls = fold(ctx, items, previous, build, lambda c: c.text.strip())
    return Completion(text or "", ctx.asking.source, f"folded in {calls} calls"), ""


def newest_that_fit(ctx: JobContext, items: list[str], build: Callable[[list[str]], Prompt]
                    ) -> list[str]:
    """The newest of `items` (kept in order) whose prompt fits: for inputs where the
    latest matter most, as a reflection on recent turns."""
    n = largest(ctx, lambda chunk: build(chunk[::-1]), items[::-1], len(items))
    return items[len(items) - n :]

"""Whether a model's answer is about its material: the answer's cosine with the centre of
the material's own text (what was said, in passages), against a floor per embedder."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from dreamd.backends.model_files import MODEL_ID
from dreamd.backends.protocols import Embedder

# The cosine an answer has at least with the centre of its material, by embedder model,
# both embedded the same way (see topic_cosine). all-MiniLM-L6-v2, chosen on the answer
# corpora (tests/data/answers_*.txt; `python -m bench.llm acceptance` chooses it again):
# the cosine under which 98 % of the bad answers to the requests of one person's
# conversations fall (answers about nothing, "You're ready to continue.", and the good
# answers of another person's), chosen on the demo's sample and the LoCoMo fixture: 0.38.
# On the second sample, which it was not chosen on, it keeps the 23 good answers (lowest
# 0.42) and refuses the 48 bad (highest 0.37). Against the turns' stored vectors (their
# retrieval keys) good answers scored 0.1-0.2 lower, and the floor of 0.4 refused some.
ON_TOPIC = {MODEL_ID: 0.38}
PASSAGE_CHARS = 1000  # the material embedded in passages of about this size (256 tokens)
ON_TOPIC_PASSAGES = 16  # at most this many, evenly spread over a long input
# What opens an item without being its content: a speaker ("user:", "Sam:") or the month
# of an era line ("2026-07 | ").
_LEAD = re.compile(r"^\s*(?:\d{4}-\d{2} \| |[\w .'’-]{1,40}:\s)")


def passages(items: Sequence[str]) -> list[str]:
    """The material's lines without their speakers, run together into passages of about
    PASSAGE_CHARS, at most ON_TOPIC_PASSAGES of them evenly spread."""
    out: list[str] = []
    for item in items:
        text = _LEAD.sub("", item, count=1).strip()
        if out and len(out[-1]) + len(text) < PASSAGE_CHARS:
            out[-1] += " " + text
        elif text:
            out.append(text)
    step = max(1, -(-len(out) // ON_TOPIC_PASSAGES))
    return out[::step]


def topic_cosine(embedder: Embedder, answer: str, items: Sequence[str]) -> float:
    """The answer's cosine with the centre of its material, each embedded as text of the
    same kind: passages of what was said, not the turns' retrieval keys (which carry
    dates, speakers and addressees, and put a good gist 0.1-0.2 lower)."""
    chunks = passages(items)
    if not chunks:
        return 1.0
    vectors = embedder.embed([*chunks, answer])
    centre = vectors[:-1].mean(axis=0)
    centre /= max(float(np.linalg.norm(centre)), 1e-12)
    return float(vectors[-1] @ centre)

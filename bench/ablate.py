"""Each part of the recall recipe taken out on its own, and its weights chosen honestly.

    python -m bench.ablate [LOCOMO_FILE]

Part by part: LoCoMo evidence recall with the whole recipe and without each part (the
key's parts need a re-embedding, so every row is a full pass). Then leave one
conversation out: for each conversation, the weights that did best on the other
conversations, and the recall they give on the one left out — the figure to quote.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.quality import DATA, Backend, locomo_scores
from dreamd.backends.local import LocalEmbedder
from dreamd.dream.jobs import embed
from dreamd.memory import recall
from dreamd.runtime.log import configure
from dreamd.text import dates, keys


@contextlib.contextmanager
def patched(module: Any, **values: Any) -> Iterator[None]:
    old = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(module, name, value)


def plain_key(turn: keys.Said) -> str:
    return f"{turn.speaker}: {turn.content}"


def key_without(part: str) -> Callable[[keys.Said], str]:
    def key(turn: keys.Said) -> str:
        content = turn.content
        if part != "dates":
            content = keys.dated(content, turn.created_at)
        if part != "names":
            content = keys.in_names(content, turn.speaker, turn.addressee)
        day = dates.day_of(turn.created_at)
        when = f"{dates.long_date(day)}. " if day is not None and part == "nothing" else ""
        to = f" (to {turn.addressee})" if turn.addressee and part != "addressee" else ""
        return f"{when}{turn.speaker}{to}: {content}"
    return key


VARIANTS: dict[str, list[tuple[Any, dict[str, Any]]]] = {
    "the whole recipe": [],
    "vector key: speaker and text only": [(embed, {"vector_key": plain_key})],
    "vector key: with the day said": [(embed, {"vector_key": key_without("nothing")})],
    "vector key: no addressee": [(embed, {"vector_key": key_without("addressee")})],
    "vector key: pronouns left": [(embed, {"vector_key": key_without("names")})],
    "vector key: relative dates left": [(embed, {"vector_key": key_without("dates")})],
    "no context vector": [(recall, {"CONTEXT_WEIGHT": 0.0})],
    "no session signal": [(recall, {"SESSION_WEIGHT": 0.0})],
    "no gist evidence": [(recall, {"GIST_WEIGHT": 0.0})],
    "no words side": [(recall, {"LEXICAL_WEIGHT": 0.0})],
    "no entity boost": [(recall, {"SPEAKER_BOOST": 0.0, "MENTION_BOOST": 0.0})],
    "no facts as evidence": [(recall, {"FACT_WEIGHT": 0.0})],
    "no period asked": [(recall, {"PERIOD_BOOST": 0.0, "PERIOD_ONLY_BOOST": 0.0})],
}
GRID = {"SESSION_WEIGHT": (0.25, 0.5, 1.0), "PERIOD_BOOST": (0.5, 1.0, 1.5)}


def run(path: Path, embedder: LocalEmbedder, changes: list[tuple[Any, dict[str, Any]]]
        ) -> dict[str, list[float]]:
    with contextlib.ExitStack() as stack:
        for module, values in changes:
            stack.enter_context(patched(module, **values))
        return locomo_scores(path, embedder, Backend("extractive"))


def pct(scores: dict[str, list[float]], key: str) -> float:
    values = scores[key]
    return 100 * sum(values) / len(values) if values else 0.0


def main() -> None:
    configure("warning")
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA / "locomo_dev.json"
    embedder = LocalEmbedder()
    for name, changes in VARIANTS.items():
        s = run(path, embedder, changes)
        print(f"ablation {name:<28} R@5 {pct(s, 'all|5'):5.1f}  R@10 {pct(s, 'all|10'):5.1f}  "
              f"R@25 {pct(s, 'all|25'):5.1f}  temporal R@10 {pct(s, '2|10'):5.1f}  "
              f"evidence in context {pct(s, 'all|inside'):5.1f}", flush=True)
    runs = {}
    for values in itertools.product(*GRID.values()):
        setting = dict(zip(GRID, values, strict=True))
        runs[tuple(values)] = run(path, embedder, [(recall, setting)])
    convs = sorted({k.split("|")[0] for s in runs.values() for k in s if k.startswith("conv ")})
    held: dict[str, list[float]] = {"10": [], "2|10": [], "inside": []}
    for left_out in convs:
        others = [c for c in convs if c != left_out]

        def tuned_on_others(setting: tuple[float, ...], others: list[str] = others) -> float:
            s = runs[setting]
            return sum(sum(s[f"{c}|10"]) for c in others) / sum(len(s[f"{c}|10"])
                                                                   for c in others)
        best = max(runs, key=tuned_on_others)
        s = runs[best]
        chosen = dict(zip(GRID, best, strict=True))
        print(f"left out {left_out}: weights tuned on the others {chosen}"
              f" -> R@10 {pct(s, f'{left_out}|10'):5.1f}, evidence in context "
              f"{pct(s, f'{left_out}|inside'):5.1f}", flush=True)
        held["10"] += s[f"{left_out}|10"]
        held["inside"] += s[f"{left_out}|inside"]
    n = len(held["10"])
    print(f"leave-one-conversation-out over {n} questions: R@10 "
          f"{100 * sum(held['10']) / n:5.1f}, evidence in a 1000-token context "
          f"{100 * sum(held['inside']) / n:5.1f}")


if __name__ == "__main__":
    main()

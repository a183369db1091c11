"""Which area of a life a fact is about, by what it means: a profile's Work, Home, Family…

A softmax regression over the embedded statement, learned from the project's own written
examples (dreamd/data/area_examples.txt: sentences under each area's heading, written for
it and for nothing else) and shipped with them (dreamd/data/area_model.json), as the fact
selector is. A keyword says little of an area: "lives for her pottery class" and "played
live at the festival" are not about a home. It knows one embedder's vector space;
with another embedder, or where it is unsure, the profile falls back on words
(dreamd.text.from_facts.topic).

    python -m dreamd.dream.areas   # learn it again from the examples, write the file
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dreamd.dream.selector import data_file

EXAMPLES = "area_examples.txt"
WEIGHTS = "area_model.json"
L2 = 0.1  # on the squared weights, against the examples' summed log-loss
STEPS = 2000
RATE = 2.0
FOLDS = 5
# An area is taken where the model is as sure as it is when, on the examples (each held
# out in turn), this share of its answers is right; a fact it is less sure of is left to
# the words, and to Other where they name no area: a wrong area misleads a reader more
# than none.
RIGHT = 0.85


@dataclass(frozen=True)
class Areas:
    model: str  # the embedder whose vectors it reads
    names: tuple[str, ...]
    weights: np.ndarray  # (dimensions, areas)
    bias: np.ndarray
    floor: float

    def chances(self, vectors: np.ndarray) -> np.ndarray:
        return _softmax(np.asarray(vectors, dtype=np.float64) @ self.weights + self.bias)

    def of(self, vectors: Mapping[int, np.ndarray]) -> dict[int, str]:
        """Each fact's area where the model is sure of it (fact id -> area)."""
        ids = list(vectors)
        if not ids:
            return {}
        chances = self.chances(np.stack([vectors[i] for i in ids]))
        best = chances.argmax(axis=1)
        return {i: self.names[k] for i, k, p in zip(ids, best, chances.max(axis=1),
                                                    strict=True) if p >= self.floor}


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    out: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return out


@functools.cache
def shipped() -> Areas | None:
    path = data_file(WEIGHTS)
    if not path.is_file():
        return None
    data = json.loads(path.read_text("utf-8"))
    return Areas(data["model"], tuple(data["areas"]),
                 np.asarray(data["weights"], dtype=np.float64),
                 np.asarray(data["bias"], dtype=np.float64), float(data["floor"]))


def for_model(model: str) -> Areas | None:
    """The area model for vectors of `model`, if one was learned in that space."""
    areas = shipped()
    return areas if areas is not None and areas.model == model else None


def examples(text: str) -> list[tuple[str, str]]:
    """(sentence, area) from the examples file: "## Area" heads, a sentence a line."""
    out, area = [], ""
    for line in text.splitlines():
        if line.startswith("## "):
            area = line[3:].strip()
        elif line.strip() and area:
            out.append((line.strip(), area))
    return out


def fit(x: np.ndarray, y: np.ndarray, areas: int) -> tuple[np.ndarray, np.ndarray]:
    """Softmax regression by full-batch gradient descent: deterministic, no library."""
    n = len(y)
    target = np.eye(areas)[y]
    w = np.zeros((x.shape[1], areas))
    b = np.zeros(areas)
    for _ in range(STEPS):
        p = _softmax(x @ w + b)
        w -= RATE * (x.T @ (p - target) / n + L2 * w / n)
        b -= RATE * (p - target).mean(axis=0)
    return w, b


def held_out(x: np.ndarray, y: np.ndarray, areas: int) -> np.ndarray:
    """Each example's chances from a model fitted without it (k-fold, in file order
    taken in turn, so every fold holds every area)."""
    fold = np.arange(len(y)) % FOLDS
    out = np.zeros((len(y), areas))
    for k in range(FOLDS):
        w, b = fit(x[fold != k], y[fold != k], areas)
        out[fold == k] = _softmax(x[fold == k] @ w + b)
    return out


def floor_for(top: np.ndarray, right: np.ndarray, share: float = RIGHT) -> float:
    """The lowest chance from which `share` of the answers as sure or surer are right."""
    for floor in np.arange(0.0, 1.0, 0.01):
        sure = top >= floor
        if sure.any() and float(right[sure].mean()) >= share:
            return round(float(floor), 2)
    return 1.0


def learned(embedder_model: str, embed: Callable[[list[str]], np.ndarray]
            ) -> dict[str, object]:
    """The model learned from the shipped examples, as the weights file holds it; its
    floor chosen on the examples alone (held out in turn), never on a benchmark."""
    text = data_file(EXAMPLES).read_text("utf-8")
    pairs = examples(text)
    names = list(dict.fromkeys(area for _, area in pairs))
    x = np.asarray(embed([s for s, _ in pairs]), dtype=np.float64)
    y = np.array([names.index(area) for _, area in pairs])
    chances = held_out(x, y, len(names))
    right = chances.argmax(axis=1) == y
    floor = floor_for(chances.max(axis=1), right)
    w, b = fit(x, y, len(names))
    return {"model": embedder_model,
            "examples_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "examples": len(pairs), "held_out_right": round(float(right.mean()), 4),
            "floor": round(floor, 4), "areas": names,
            "bias": [round(float(v), 6) for v in b],
            "weights": [[round(float(v), 6) for v in row] for row in w]}


def main() -> None:
    from dreamd.backends.local import LocalEmbedder

    embedder = LocalEmbedder()
    data = learned(embedder.model, embedder.embed)
    path = Path(__file__).parent.parent / "data" / WEIGHTS
    path.write_text(json.dumps(data) + "\n", "utf-8")
    print(f"{path}: {data['examples']} sentences, {data['held_out_right']:.1%} right "
          f"held out, floor {data['floor']}")


if __name__ == "__main__":
    main()

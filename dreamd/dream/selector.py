"""Which proposed facts are worth keeping: a linear model on the embedder's vectors.

Extraction proposes every statement a turn makes about someone (dreamd.text.facts); most
are pleasantries, reactions and comments on the other's news. The selector keeps those
whose vector lies on the side of "something a friend would remember": a logistic
regression over the embedded statement, learned from the project's own written examples
(dreamd/data/fact_examples.txt, each sentence put through extraction as a turn would be)
and shipped with them (dreamd/data/fact_selector.json). It knows one embedder's vector
space; with another embedder there is no selector and the proposals are kept by words
alone (`by_words`).

A model run for every proposal cost the facts job more than all else it does, so the
selector looks twice. First at a glance: a second linear model, learned from the same
examples, reads the mean of each statement's word vectors, which the embedder keeps
without a run (`LocalEmbedder.glance`), and passes over what it is sure is not worth
keeping: a score below the one under which GLANCE_LOSS of the examples' keepers fall,
each held out in turn. The rest get their model run and the selector's say.

    python -m dreamd.dream.selector   # learn it again from the examples, write the file
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from dreamd.backends.protocols import Embedder, Glancer
from dreamd.text.facts import NUMBER, PROPER, extract

EXAMPLES = "fact_examples.txt"
WEIGHTS = "fact_selector.json"
L2 = 0.1  # on the squared weights, against the examples' summed log-loss
STEPS = 3000
RATE = 0.5
FOLDS = 5
SPLITS = 3  # ways the examples are split into folds, for the cut
BETA = 0.5
# The share of the examples' keepers (held out) the glance may pass over, chosen before any
# measure. The glance reads words, not how they are put together: informal keepers (slang,
# clipped words) score low at it, and more examples of that kind are the remedy, not a
# floor fitted to a sample.
GLANCE_LOSS = 0.01
# Speakers and listeners the examples are told by, in turn: the model learns what is
# said, not who said it.
_NAMES = ("Alex", "Priya", "Tomás", "Mei", "Kwame", "Sofia", "Jonas", "Aiyana", "Ravi", "Lena")
_SAID_AT = "2024-05-15T10:00:00+00:00"


def _chance(vectors: np.ndarray, weights: np.ndarray, bias: float) -> np.ndarray:
    logits = np.asarray(vectors, dtype=np.float64) @ weights + bias
    result: np.ndarray = 1.0 / (1.0 + np.exp(-logits))
    return result


@dataclass(frozen=True)
class Glance:
    """The first look: a linear model on a statement's mean word vector."""

    weights: np.ndarray
    bias: float
    floor: float  # below it, a proposal is passed over without a model run

    def chances(self, glances: np.ndarray) -> np.ndarray:
        """The chance, at a glance, that each statement is worth keeping."""
        return _chance(glances, self.weights, self.bias)

    def worth_a_run(self, glances: np.ndarray) -> np.ndarray:
        return self.chances(glances) >= self.floor


@dataclass(frozen=True)
class Selector:
    model: str  # the embedder whose vectors it reads
    weights: np.ndarray
    bias: float
    threshold: float
    glance: Glance | None = None

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """The chance, as the model puts it, that each statement is worth keeping."""
        return _chance(vectors, self.weights, self.bias)

    def keep(self, vectors: np.ndarray) -> np.ndarray:
        return self.scores(vectors) >= self.threshold


def data_file(name: str) -> Path:
    return Path(str(resources.files("dreamd") / "data" / name))


@functools.cache
def shipped() -> Selector | None:
    path = data_file(WEIGHTS)
    if not path.is_file():
        return None
    data = json.loads(path.read_text("utf-8"))
    first = data.get("glance")
    glance = Glance(np.asarray(first["weights"], dtype=np.float64), float(first["bias"]),
                    float(first["floor"])) if first else None
    return Selector(data["model"], np.asarray(data["weights"], dtype=np.float64),
                    float(data["bias"]), float(data["threshold"]), glance)


def for_model(model: str) -> Selector | None:
    """The selector for vectors of `model`, if one was learned in that space."""
    selector = shipped()
    return selector if selector is not None and selector.model == model else None


def by_words(statement: str, subject: str) -> bool:
    """Without a selector: a proposal is kept when it could be told of its subject by name
    ("Sam works as a nurse"), or, quoted, when it names someone or something or gives a
    number (`Sam: "Ana moved to Porto"`)."""
    if statement.startswith((f"{subject} ", f"{subject}'s ")):
        return True
    said = statement.removeprefix(f'{subject}: "').replace(subject, "")
    return bool(PROPER.search(said) or NUMBER.search(said))


def chosen(statements: list[tuple[str, str]], vectors: np.ndarray | None, model: str
           ) -> list[bool]:
    """Which (subject, statement) proposals to keep, given their vectors by `model`: the
    selector's say where one was learned in that space, else by words alone."""
    selector = for_model(model)
    if selector is not None and vectors is not None and len(statements):
        return [bool(k) for k in selector.keep(vectors)]
    return [by_words(statement, subject) for subject, statement in statements]


def worth_a_run(statements: list[str], embedder: Embedder) -> list[bool]:
    """Which statements the selector does not pass over at a glance: all of them where it
    has no glance in this embedder's space, or the embedder no glance to give."""
    selector = for_model(embedder.model)
    if not statements or selector is None or selector.glance is None \
            or not isinstance(embedder, Glancer):
        return [True] * len(statements)
    distinct = list(dict.fromkeys(statements))
    worth = dict(zip(distinct, selector.glance.worth_a_run(embedder.glance(distinct)),
                     strict=True))
    return [bool(worth[s]) for s in statements]


def examples(text: str) -> list[tuple[str, bool]]:
    """(sentence, worth keeping) from the examples file's "+ "/"- " lines."""
    out = []
    for line in text.splitlines():
        if line[:2] in ("+ ", "- "):
            out.append((line[2:].strip(), line[0] == "+"))
    return out


def proposals(pairs: list[tuple[str, bool]]) -> list[tuple[str, bool, int]]:
    """Each example put through extraction as one turn, speakers taken in turn from a
    list of names: (statement, label, which example) for each statement it proposes."""
    out = []
    for i, (sentence, label) in enumerate(pairs):
        speaker, listener = _NAMES[i % len(_NAMES)], _NAMES[(i + 3) % len(_NAMES)]
        out += [(c.statement, label, i)
                for c in extract(speaker, sentence, _SAID_AT, listener)]
    return out


def fit(vectors: np.ndarray, labels: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Logistic regression by full-batch gradient descent: deterministic, no library."""
    x = np.asarray(vectors, dtype=np.float64)
    y = labels.astype(np.float64)
    w = np.zeros(x.shape[1])
    b = 0.0
    n = len(y)
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        w -= RATE * (x.T @ (p - y) / n + l2 * w / n)
        b -= RATE * float(np.mean(p - y))
    return w, b


def held_out(x: np.ndarray, y: np.ndarray, example: np.ndarray, folds: int = FOLDS,
             run: int = 0) -> np.ndarray:
    """Each statement's score from a model fitted without its example sentence (k-fold
    over the examples, in file order: two statements of one sentence never straddle).
    `run` r puts runs of r + 1 neighbouring examples in one fold: another split."""
    fold = (example // (run + 1)) % folds
    scores = np.zeros(len(y))
    for k in range(folds):
        test = np.flatnonzero(fold == k)
        train = np.flatnonzero(fold != k)
        w, b = fit(x[train], y[train])
        scores[test] = 1.0 / (1.0 + np.exp(-(x[test] @ w + b)))
    return scores


def threshold_for(splits: list[np.ndarray], y: np.ndarray, beta: float = BETA) -> float:
    """The cut that scores best on F-beta over held-out scores, averaged over the splits
    (`held_out` runs): beta < 1 weighs precision above recall, since a wrong memory costs
    more than a missing one. Near its best the curve is flat (0.61 to 0.65 within 0.002
    on one split), so one split's best moved with any edit of the examples."""
    best, cut = -1.0, 0.5
    for t in np.arange(0.30, 0.91, 0.01):
        scores = []
        for held in splits:
            kept = held >= t
            if not kept.any():
                break
            precision = float(y[kept].mean())
            recall = float(kept[y].mean())
            scores.append((1 + beta**2) * precision * recall / (beta**2 * precision + recall))
        else:
            f = float(np.mean(scores))
            if f > best + 1e-12:
                best, cut = f, round(float(t), 2)
    return cut


def learned(embedder_model: str, embed: Callable[[list[str]], np.ndarray],
            glance: Callable[[list[str]], np.ndarray]) -> dict[str, object]:
    """The selector learned from the shipped examples, as the weights file holds it: its
    cuts chosen on the examples alone (held out in turn), never on a benchmark."""
    text = data_file(EXAMPLES).read_text("utf-8")
    told = proposals(examples(text))
    statements = [s for s, _, _ in told]
    y = np.array([label for _, label, _ in told])
    example = np.array([i for _, _, i in told])
    x = np.asarray(embed(statements), dtype=np.float64)
    threshold = threshold_for([held_out(x, y, example, run=r) for r in range(SPLITS)], y)
    w, b = fit(x, y)
    g = np.asarray(glance(statements), dtype=np.float64)
    floor = float(np.quantile(held_out(g, y, example)[y], GLANCE_LOSS))
    gw, gb = fit(g, y)
    return {"model": embedder_model,
            "examples_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "examples": len(told), "threshold": threshold, "bias": round(b, 6),
            "weights": [round(float(v), 6) for v in w],
            "glance": {"floor": round(floor, 4), "bias": round(gb, 6),
                       "weights": [round(float(v), 6) for v in gw]}}


def main() -> None:
    from dreamd.backends.local import LocalEmbedder

    embedder = LocalEmbedder()
    data = learned(embedder.model, embedder.embed, embedder.glance)
    path = Path(__file__).parent.parent / "data" / WEIGHTS
    path.write_text(json.dumps(data) + "\n", "utf-8")
    print(f"{path}: {data['examples']} statements from {EXAMPLES}")


if __name__ == "__main__":
    main()

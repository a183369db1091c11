"""Which area of a life a fact belongs to, by meaning: the area whose written examples it is
nearest to in the embedder's space.

The examples (dreamd/data/area_examples.txt) are a few facts per area, told as the facts job
tells them, written for dreamd; each area is the normalised mean of its examples' vectors,
shipped in dreamd/data/area_centroids.json with the digest of the examples it was made
from. "Moment" is no area of a profile: what happened once and says little about who
someone is ("Alex couldn't find his keys this morning") stays in the facts and the eras.
With another embedder there are no centroids, and the profile groups facts by their words
(dreamd.dream.shown.TOPICS).

    python -m dreamd.dream.areas   # make the centroids again from the examples
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

EXAMPLES = "area_examples.txt"
CENTROIDS = "area_centroids.json"
MOMENT = "Moment"


@dataclass(frozen=True)
class Areas:
    model: str
    names: tuple[str, ...]
    centroids: np.ndarray  # one normalised row per name

    def of(self, vectors: np.ndarray) -> list[str]:
        """The nearest area of each vector."""
        if not len(vectors):
            return []
        scores = np.asarray(vectors, dtype=np.float64) @ self.centroids.T
        return [self.names[i] for i in np.argmax(scores, axis=1)]


def _data_file(name: str) -> Path:
    return Path(str(resources.files("dreamd") / "data" / name))


def examples(text: str) -> dict[str, list[str]]:
    """Area -> its example facts, from the file's "## Area" sections."""
    out: dict[str, list[str]] = {}
    area = ""
    for line in text.splitlines():
        if line.startswith("## "):
            area = line[3:].strip()
        elif line.strip() and not line.startswith("#") and area:
            out.setdefault(area, []).append(line.strip())
    return out


def centroids(embed: Callable[[list[str]], np.ndarray], text: str
              ) -> tuple[tuple[str, ...], np.ndarray]:
    by_area = examples(text)
    names = tuple(by_area)
    rows = []
    for name in names:
        mean = np.asarray(embed(by_area[name]), dtype=np.float64).mean(axis=0)
        rows.append(mean / max(float(np.linalg.norm(mean)), 1e-12))
    return names, np.stack(rows)


@functools.cache
def shipped() -> Areas | None:
    path = _data_file(CENTROIDS)
    if not path.is_file():
        return None
    data = json.loads(path.read_text("utf-8"))
    return Areas(data["model"], tuple(data["names"]),
                 np.asarray(data["centroids"], dtype=np.float64))


def for_model(model: str) -> Areas | None:
    """The areas in `model`'s vector space, if they were made there."""
    areas = shipped()
    return areas if areas is not None and areas.model == model else None


def made(model: str, embed: Callable[[list[str]], np.ndarray]) -> dict[str, object]:
    text = _data_file(EXAMPLES).read_text("utf-8")
    names, rows = centroids(embed, text)
    return {"model": model, "examples_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "names": list(names),
            "centroids": [[round(float(v), 6) for v in row] for row in rows]}


def main() -> None:
    from dreamd.backends.local import LocalEmbedder

    embedder = LocalEmbedder()
    data = made(embedder.model, embedder.embed)
    path = Path(__file__).parent.parent / "data" / CENTROIDS
    path.write_text(json.dumps(data) + "\n", "utf-8")
    print(f"{path}: {len(data['names'])} areas from {EXAMPLES}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()

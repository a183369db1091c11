"""The two small protocols every backend implements."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from dreamd.models import Completion, Prompt


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    model: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


class Completer(Protocol):
    """Answers one Prompt; an extractive backend selects from `prompt.items`."""

    name: str

    def complete(self, prompt: Prompt) -> Completion: ...

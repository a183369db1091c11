"""The two small protocols every backend implements, and one an embedder may add."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from dreamd.models import Completion, Prompt


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    model: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class Glancer(Protocol):
    """An embedder that also tells, without a model run, what a text is about (the
    embedded default: the mean of its words' input vectors), for the facts' selector."""

    def glance(self, texts: list[str]) -> np.ndarray: ...


class Completer(Protocol):
    """Answers one Prompt; an extractive backend selects from `prompt.items`."""

    name: str

    def complete(self, prompt: Prompt) -> Completion: ...

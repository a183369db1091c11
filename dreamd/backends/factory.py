"""Build the configured backends; the only place that chooses between them."""

from __future__ import annotations

from dreamd.backends.extractive import ExtractiveCompleter
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.local import LocalEmbedder
from dreamd.backends.protocols import Completer, Embedder
from dreamd.config import Config


def make_embedder(config: Config) -> Embedder:
    if config.embed.backend == "hashing":
        return HashingEmbedder()
    return LocalEmbedder(threads=config.embed.threads)


def make_backends(config: Config) -> tuple[Embedder, Completer]:
    embedder = make_embedder(config)
    return embedder, ExtractiveCompleter(embedder)


def embedder_model_name(config: Config) -> str:
    """The model id the configured embedder writes under, without loading it."""
    if config.embed.backend == "hashing":
        return HashingEmbedder().model
    from dreamd.backends.local import MODEL_ID

    return MODEL_ID

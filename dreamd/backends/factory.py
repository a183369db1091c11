"""Build the configured backends; the only place that chooses between them."""

from __future__ import annotations

import threading

from dreamd.backends.extractive import ExtractiveCompleter
from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.local import LocalEmbedder
from dreamd.backends.protocols import Completer, Embedder
from dreamd.config import Config


def make_embedder(config: Config, stop: threading.Event | None = None) -> Embedder:
    if config.embed.backend == "hashing":
        return HashingEmbedder()
    if config.embed.backend == "openai":
        from dreamd.backends.openai_backend import OpenAIEmbedder

        return OpenAIEmbedder(config, stop=stop)
    return LocalEmbedder(threads=config.embed.threads)


def make_backends(config: Config, stop: threading.Event | None = None
                  ) -> tuple[Embedder, Completer]:
    """The configured backends; once `stop` is set, network backends start no new call."""
    embedder = make_embedder(config, stop)
    if config.completer.backend == "openai":
        from dreamd.backends.openai_backend import OpenAICompleter

        return embedder, OpenAICompleter(config.completer, stop=stop)
    return embedder, ExtractiveCompleter(embedder)


def embedder_model_name(config: Config) -> str:
    """The model id the configured embedder writes under, without loading it."""
    if config.embed.backend == "hashing":
        return HashingEmbedder().model
    if config.embed.backend == "openai":
        return f"openai:{config.embed.model}"
    from dreamd.backends.local import MODEL_ID

    return MODEL_ID


def release(*backends: object) -> None:
    """Close what the backends hold open (a network backend's connections)."""
    for backend in backends:
        close = getattr(backend, "close", None)
        if close is not None:
            close()

"""Build the configured backends; the only place that chooses between them."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dreamd.config import Config

if TYPE_CHECKING:  # the backends' modules load numpy: imported where a backend is made
    from dreamd.backends.protocols import Completer, Embedder


def make_embedder(config: Config, stop: threading.Event | None = None) -> Embedder:
    if config.embed.backend == "hashing":
        from dreamd.backends.hashing import HashingEmbedder

        return HashingEmbedder()
    if config.embed.backend == "openai":
        from dreamd.backends.openai_backend import OpenAIEmbedder

        return OpenAIEmbedder(config, stop=stop)
    from dreamd.backends.local import LocalEmbedder

    return LocalEmbedder(threads=config.embed.threads, cache=config.embed.model_cache)


def check_backends(config: Config) -> None:
    """What making the configured backends would refuse, found without making them (a
    process whose passes make them elsewhere still fails at its start)."""
    if config.embed.backend not in ("hashing", "openai"):
        from dreamd.backends.model_files import check_model_files

        check_model_files()


def make_backends(config: Config, stop: threading.Event | None = None
                  ) -> tuple[Embedder, Completer]:
    """The configured backends; once `stop` is set, network backends start no new call."""
    embedder = make_embedder(config, stop)
    if config.completer.backend == "openai":
        from dreamd.backends.openai_backend import OpenAICompleter

        return embedder, OpenAICompleter(config.completer, stop=stop)
    from dreamd.dream.extractive import ExtractiveCompleter

    return embedder, ExtractiveCompleter(embedder)


def embedder_model_name(config: Config) -> str:
    """The model id the configured embedder writes under, without loading it."""
    if config.embed.backend == "hashing":
        from dreamd.backends.hashing import HashingEmbedder

        return HashingEmbedder().model
    if config.embed.backend == "openai":
        return f"openai:{config.embed.model}"
    from dreamd.backends.model_files import MODEL_ID

    return MODEL_ID


def release(*backends: object) -> None:
    """Close what the backends hold open (a network backend's connections)."""
    for backend in backends:
        close = getattr(backend, "close", None)
        if close is not None:
            close()

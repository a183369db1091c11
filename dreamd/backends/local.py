"""The embedded default embedder: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, offline."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from dreamd.backends import write_gate
from dreamd.backends.model_cache import build, cache_dir, cache_key, cached_model, remove
from dreamd.backends.model_files import (
    MODEL_ID,
    MODEL_SHA256,
    TOKENIZER_SHA256,
    WORDS,
    model_file,
    tokenizer_file,
    verified,
)
from dreamd.backends.protobuf import fields
from dreamd.errors import ModelFileError

MAX_TOKENS = 256  # the sentence-transformers max_seq_length of all-MiniLM-L6-v2
# Texts per model run. Its working memory grows with the batch (attention is texts x
# tokens x tokens): measured on 640 texts of 5-110 words, 16 a run peaked at 302 MB and
# embedded as fast as 32 (97-103/s against 94-98/s), which peaked at 394 MB. Once the
# model loads from its optimized copy (model_cache.py), 16 a run set a first pass's peak
# over a 663-turn conversation (294 MB); 8 a run, 255 MB, and 4 no lower, embedding the
# conversation's turns no slower (70-83/s against 49-52/s, on a loaded box).
RUN_TEXTS = 8


@functools.cache
def word_vectors(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The model's input word-piece vectors, (int8 rows, float32 scale of each), read
    from the ONNX file (the ModelProto's graph, field 7; its initializers, field 5; each
    a TensorProto named in field 8 with its bytes in field 9). About 12 MB, copied out of
    the file where it is mapped, which is then let go: the scan for them pages in much of
    the rest of the file (20 MB resident where it stayed mapped)."""
    found: dict[str, memoryview] = {}
    unread = ModelFileError(f"model file {path} holds no word vectors dreamd can read")
    try:
        with path.open("rb") as fh:
            data = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    except (OSError, ValueError):  # an empty file cannot be mapped
        raise unread from None
    for field, graph in fields(data):
        if field != 7 or not isinstance(graph, memoryview):
            continue
        for kind, tensor in fields(graph):
            if kind != 5 or not isinstance(tensor, memoryview):
                continue
            parts = dict(fields(tensor))
            name, raw = parts.get(8), parts.get(9)
            if isinstance(name, memoryview) and isinstance(raw, memoryview) \
                    and bytes(name).startswith(WORDS.encode()):
                found[bytes(name).decode()] = raw
    rows, scale = found.get(f"{WORDS}_q"), found.get(f"{WORDS}_scale")
    if rows is None or scale is None or len(rows) * 4 != len(scale) * LocalEmbedder.dim:
        raise unread
    return (np.frombuffer(rows, dtype=np.int8).reshape(-1, LocalEmbedder.dim).copy(),
            np.frombuffer(scale, dtype=np.float32).reshape(-1, 1).copy())


def give_back() -> None:
    """Return the C heap's free memory to the system (glibc's malloc_trim; elsewhere
    nothing)."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).malloc_trim(0)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class LocalEmbedder:
    """Mean-pooled, normalised sentence vectors, as sentence-transformers computes them."""

    model = MODEL_ID
    dim = 384

    def __init__(self, threads: int = 0, cache: str = "") -> None:
        from tokenizers import Tokenizer

        self._onnx_path = verified(model_file(), MODEL_SHA256)
        tok_path = verified(tokenizer_file(), TOKENIZER_SHA256)
        # threads 0: as many as the cores (up to 4), shared with the other workers on
        # this machine once they are known (`share`); a set number is kept as set.
        self._auto = threads == 0
        self._threads = threads or min(4, cores())
        # The model is loaded at its first run, not here: a pass with nothing to embed
        # (most of a daemon's) never pays for it (about 0.3 s of CPU and 100 MB).
        self._sessions: dict[int, Any] = {}
        self._inputs: set[str] = set()
        self._loading = threading.Lock()
        self._cache = cache  # where the optimized model is kept (model_cache.cache_dir)
        self.loaded_from: Path | None = None  # the file the model was last loaded from
        self._tokenizer = Tokenizer.from_file(str(tok_path))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()
        self.calls = 0

    @property
    def threads(self) -> int:
        return self._threads

    def share(self, workers: int) -> None:
        """`workers` dreamd processes embed on this machine: with threads left to dreamd,
        each takes its share of the cores (two workers on two cores, one thread each), so
        that they do not crowd each other out. The next batch runs with it."""
        if self._auto:
            self._threads = max(1, min(4, cores()) // max(1, workers))

    def _session_for(self, threads: int) -> Any:
        """An onnxruntime session with `threads` intra-op threads (one per count used)."""
        with self._loading:
            return self._sessions.get(threads) or self._load(threads)

    def _load(self, threads: int) -> Any:
        import onnxruntime as ort

        directory, key = cache_dir(self._cache), cache_key(ort.__version__)
        kept = None if directory is None else self._kept(ort, threads, directory, key)
        if kept is None and directory is not None and build(directory, key, self._onnx_path):
            kept = self._kept(ort, threads, directory, key)
        if kept is not None:
            session, self.loaded_from = kept
        else:
            session = self._create(ort, threads, self._onnx_path)
            self.loaded_from = self._onnx_path
        # Loading the shipped model folds the int8 weights into float ones, through a
        # float copy of each that is then freed: about 60 MB the C allocator would
        # otherwise keep.
        give_back()
        self._sessions[threads] = session
        self._inputs = {i.name for i in session.get_inputs()}
        return session

    def _kept(self, ort: Any, threads: int, directory: Path, key: str
              ) -> tuple[Any, Path] | None:
        """A session from the optimized model kept under `key`, and its file, if there
        is one whole that the runtime reads (one it does not is removed, built again)."""
        try:
            kept = cached_model(directory, key)
        except OSError:
            return None
        if kept is None:
            return None
        try:
            return self._create(ort, threads, kept, optimized=True), kept
        except Exception:  # not a model this runtime reads: build it again
            remove(kept.parent)
            return None

    def _create(self, ort: Any, threads: int, path: Path, optimized: bool = False) -> Any:
        """An onnxruntime session of the model at `path` (`optimized`: as kept by
        model_cache, loaded as it is)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads wait instead of spinning: measured on 2 cores, one process
        # embeds as fast either way (511/s spinning, 531/s not), but two processes
        # side by side (workers on one machine, or a pass beside the chat app) made
        # 354/s together spinning and 532/s not.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # No memory pattern: onnxruntime plans (and keeps) one buffer per input shape,
        # and batches padded to their longest text come in many shapes. Measured on
        # 640 texts of 5-110 words: a process peaked at 600 MB with it, 394 MB
        # without, embedding as fast (94/s against 81-100/s).
        options.enable_mem_pattern = False
        # No arena either: onnxruntime's keeps every block a run ever needed, sized for
        # the longest batch so far, for the life of the session; freed, a run's working
        # memory goes back to the allocator (see `give_back`).
        options.enable_cpu_mem_arena = False
        if optimized:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _session_inputs(self) -> set[str]:
        self._session_for(self._threads)
        return self._inputs

    def feeds(self, texts: list[str]) -> dict[str, np.ndarray]:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._session_inputs():
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        with write_gate.waiting(), self._lock:  # the model's run lets go of the GIL
            hidden = self._session_for(self._threads).run(None, feeds)[0]
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result

    def glance(self, texts: list[str]) -> np.ndarray:
        """What each text is about at a glance, without a model run: the mean of its word
        pieces' input vectors, normalised (a bag of words in the model's own word space,
        a thousandth of a run's cost). Only the facts' selector reads these."""
        rows, scale = word_vectors(self._onnx_path)
        special = {self._tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, encoding in enumerate(self._tokenizer.encode_batch(texts)):
            ids = [t for t in encoding.ids if t not in special]
            if ids:
                mean = (rows[ids] * scale[ids]).mean(axis=0)
                out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        return out

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Sort by length so each padded batch wastes little; restore the order after.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), RUN_TEXTS):
            idx = order[start : start + RUN_TEXTS]
            out[idx] = self.run(self.feeds([texts[i] or " " for i in idx]))
        return out

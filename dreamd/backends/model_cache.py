"""The embedded model as onnxruntime optimizes it, kept on disk so that later passes load
it as it is.

Creating a session from the shipped int8 model optimizes its graph there and then,
turning the int8 weights into float ones through copies alive at once: a pass peaked at
about 275 MB for it. The optimized graph saved once and loaded with optimization off
peaks at about 200 MB and embeds the same vectors. It may hold optimizations for this
CPU and this onnxruntime only, so its name carries a key of the runtime's version, the
model file's digest and what the CPU supports; its own digest is in its name too, so a
file cut short or changed on disk is never loaded (it is built again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from dreamd.backends.model_files import MODEL_SHA256, sha256_of

OFF = "off"
PREFIX = "minilm-int8-"


def cache_dir(setting: str, environ: dict[str, str] | None = None) -> Path | None:
    """Where the optimized model is kept: the configured directory, else systemd's
    $CACHE_DIRECTORY (CacheDirectory=), else $XDG_CACHE_HOME/dreamd, else
    ~/.cache/dreamd; None when the setting is "off"."""
    env = os.environ if environ is None else environ
    if setting == OFF:
        return None
    if setting:
        return Path(setting).expanduser()
    if env.get("CACHE_DIRECTORY"):
        return Path(env["CACHE_DIRECTORY"].split(":")[0])
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "dreamd"


def cpu_features() -> str:
    """What this CPU supports, as the kernel lists it (the optimized graph may use any
    of it); elsewhere, the machine's name."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    return platform.machine() + " " + platform.processor()


def cache_key(runtime_version: str) -> str:
    """The key an optimized model is kept under: the runtime, the model, the CPU."""
    material = "\n".join((runtime_version, MODEL_SHA256, platform.machine(), cpu_features()))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cached_model(directory: Path, key: str) -> Path | None:
    """The optimized model kept under `key`, if one is there whole: its content must
    match the digest in its name. A file that does not is removed."""
    for path in sorted(directory.glob(f"{PREFIX}{key}-*.onnx")):
        if sha256_of(path)[:16] == path.stem.rsplit("-", 1)[-1]:
            return path
        with contextlib.suppress(OSError):
            path.unlink()
    return None


def build(directory: Path, key: str, create: Any) -> Any:
    """A session from the shipped model (`create(path_to_save_to_or_None)`), saving the
    optimized graph under `key` on the way: written to a file of its own, then renamed
    into place whole, so that a reader (another worker) never sees part of one. Kept
    models of other keys are removed. Any failure to save leaves the session as it is."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".building-", suffix=".onnx", dir=directory)
        os.close(fd)
    except OSError:
        return create(None)
    try:
        session = create(temp)
        digest = sha256_of(Path(temp))[:16]
        os.replace(temp, directory / f"{PREFIX}{key}-{digest}.onnx")
    except Exception:  # the runtime could not save it: load as before
        return create(None)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    for old in directory.glob(f"{PREFIX}*.onnx"):
        if not old.name.startswith(f"{PREFIX}{key}-"):
            with contextlib.suppress(OSError):
                old.unlink()
    return session

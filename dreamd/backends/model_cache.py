"""The embedded model as onnxruntime optimizes it, kept on disk so that later passes load
it as it is.

Creating a session from the shipped int8 model optimizes its graph there and then,
turning the int8 weights into float ones through copies alive at once: a pass peaked at
about 275 MB for it. The optimized graph saved once and loaded with optimization off
peaks at about 200 MB and embeds the same vectors. It may hold optimizations for this
CPU and this onnxruntime only, so its name carries a key of the runtime's version, the
model file's digest and what the CPU supports; its own digest is in its name too, so a
file cut short or changed on disk is never loaded (it is built again). It is built in a
process of its own, whose peak is given back before the pass loads the result.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dreamd.backends.model_files import MODEL_SHA256, sha256_of

OFF = "off"
PREFIX = "minilm-int8-"
BUILDING = ".building-"  # a build's file, until it is renamed into place


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
    match the digest in its name. A file that does not is removed, and so is what a
    build that was killed left (`clear_stale`)."""
    clear_stale(directory)
    for path in sorted(directory.glob(f"{PREFIX}{key}-*.onnx")):
        if sha256_of(path)[:16] == path.stem.rsplit("-", 1)[-1]:
            return path
        with contextlib.suppress(OSError):
            path.unlink()
    return None


def clear_stale(directory: Path, now: float | None = None) -> list[Path]:
    """Remove the files of builds that can no longer finish, and return them: a build's
    file is named by the process that builds it (`.building-PID-…`), whose builder dies
    with it; it is stale once that process is gone, or older than any build may run
    (BUILD_SECONDS: the builder is killed then). Another process's build under way, here
    or in a second daemon, is left alone."""
    moment = time.time() if now is None else now
    removed = []
    for path in directory.glob(f"{BUILDING}*.onnx"):
        pid = path.name.removeprefix(BUILDING).split("-", 1)[0]
        try:
            old = moment - path.stat().st_mtime > BUILD_SECONDS
        except OSError:  # gone already: its build finished or another process cleared it
            continue
        if old or not (pid.isdigit() and alive(int(pid))):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # not ours to signal: it exists
        return True
    return True


def build(directory: Path, key: str, source: Path) -> Path | None:
    """Optimize the shipped model at `source` and keep it under `key`; the kept file, or
    None where it could not be made (the caller loads the shipped model as before).

    The optimizing load runs in a process of its own: it peaks there (about 275 MB) and
    gives all of it back when it exits, before this process loads the result. Its output
    is written to a file of its own and renamed into place whole, so that a reader
    (another worker) never sees part of one. Kept models of other keys are removed."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f"{BUILDING}{os.getpid()}-", suffix=".onnx",
                                    dir=directory)
        os.close(fd)
    except OSError:
        return None
    try:
        made = subprocess.run([sys.executable, "-m", __name__, str(source), temp,
                               str(os.getpid())],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=BUILD_SECONDS, check=False)
        if made.returncode != 0 or os.path.getsize(temp) == 0:
            return None
        kept = directory / f"{PREFIX}{key}-{sha256_of(Path(temp))[:16]}.onnx"
        os.replace(temp, kept)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    for old in directory.glob(f"{PREFIX}*.onnx"):
        if old != kept:
            with contextlib.suppress(OSError):
                old.unlink()
    return kept


# How long the optimizing load may take (about a second on a small box).
BUILD_SECONDS = 300
PR_SET_PDEATHSIG = 1
M_TRIM_THRESHOLD = -1  # mallopt's parameter number (malloc.h)


def optimize(source: str, target: str) -> None:
    """Load the model at `source` as onnxruntime does by default, saving the optimized
    graph to `target` (what `build` runs in its own process)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = target
    options.log_severity_level = 3  # its note that the graph suits this CPU only
    # The session is never run: its kernels need not pack the weights for runs (about
    # 17 MB at the end of the load). The graph it saves is the same, byte for byte.
    options.add_session_config_entry("session.disable_prepacking", "1")
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def die_with(parent: int) -> None:
    """End this process when `parent` ends (Linux), so that nothing writes a build's file
    once the process that would keep it is gone; at once if it is gone already."""
    with contextlib.suppress(Exception):  # not Linux, or a seccomp filter refuses it
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # it died before we asked
        os._exit(1)


def heap_trimmed() -> None:
    """Have glibc give the top of its heap back at every free, not only past 128 KiB:
    the load frees the copies it folds the weights through while it makes more, and
    trimmed at once they peak about 5 MB lower. (Nothing elsewhere.)"""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).mallopt(M_TRIM_THRESHOLD, 0)


if __name__ == "__main__":
    die_with(int(sys.argv[3]))
    heap_trimmed()
    optimize(*sys.argv[1:3])

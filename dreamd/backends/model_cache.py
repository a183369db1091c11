"""The embedded model as onnxruntime optimizes it, kept on disk so that later passes load
it as it is.

Creating a session from the shipped int8 model optimizes its graph there and then,
turning the int8 weights into float ones through copies alive at once: a pass peaked at
about 275 MB for it. The optimized graph saved once and loaded with optimization off
embeds the same vectors. The vocabulary's word vectors are left int8 there
(`rows_looked_up`: a run scales the rows it looks up), 12 MB where their floats took
47 MB. It is kept as a directory of two files: the graph (`model.onnx`, 55 KB) and its
weights (`weights`, 55 MB), which the runtime maps where it loads them instead of reading
a copy of them into memory to parse beside the weights it makes from it. It may hold
optimizations for this CPU and this onnxruntime only, so its name carries a key of the
runtime's version, the model file's digest and what the CPU supports; the digest of its
two files is in its name too, so a copy cut short or changed on disk is never loaded (it
is built again). It is built in a process of its own, whose peak is given back before
the pass loads the result.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dreamd.backends.model_files import MODEL_SHA256, WORDS, sha256_of
from dreamd.backends.protobuf import field, spans

OFF = "off"
PREFIX = "minilm-int8-"
BUILDING = ".building-"  # a build's directory, until it is renamed into place
GRAPH = "model.onnx"  # a kept copy's graph, in its directory
WEIGHTS = "weights"  # its weights, named in the graph, mapped by the runtime


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


def digest_of(kept: Path) -> str:
    """The digest a kept copy's name carries: of its graph, then its weights."""
    return sha256_of(kept / GRAPH, kept / WEIGHTS)[:16]


def remove(path: Path) -> None:
    """Remove a kept copy or a build's directory (or a file of either), as far as it can."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def cached_model(directory: Path, key: str) -> Path | None:
    """The graph of the optimized model kept under `key`, if one is there whole: its
    files must match the digest in its name. A copy that does not is removed, and so is
    what a build that was killed left (`clear_stale`)."""
    clear_stale(directory)
    for path in sorted(directory.glob(f"{PREFIX}{key}-*")):
        try:
            if path.is_dir() and digest_of(path) == path.name.rsplit("-", 1)[-1]:
                return path / GRAPH
        except OSError:  # a file of it missing: built again
            pass
        remove(path)
    return None


def clear_stale(directory: Path, now: float | None = None) -> list[Path]:
    """Remove what builds that can no longer finish left, and return it: a build's
    directory is named by the process that builds it (`.building-PID-…`), whose builder
    dies with it; it is stale once that process is gone, or older than any build may run
    (BUILD_SECONDS: the builder is killed then). Another process's build under way, here
    or in a second daemon, is left alone."""
    moment = time.time() if now is None else now
    removed = []
    for path in directory.glob(f"{BUILDING}*"):
        pid = path.name.removeprefix(BUILDING).split("-", 1)[0]
        try:
            old = moment - path.stat().st_mtime > BUILD_SECONDS
        except OSError:  # gone already: its build finished or another process cleared it
            continue
        if old or not (pid.isdigit() and alive(int(pid))):
            remove(path)
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
    """Optimize the shipped model at `source` and keep it under `key`; the kept graph,
    or None where it could not be made (the caller loads the shipped model as before).

    The optimizing load runs in a process of its own: it peaks there and gives all of it
    back when it exits, before this process loads the result. Its output is written to a
    directory of its own and renamed into place whole, so that a reader (another worker)
    never sees part of one. Kept models of other keys are removed."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f"{BUILDING}{os.getpid()}-", dir=directory))
    except OSError:
        return None
    try:
        made = subprocess.run([sys.executable, "-m", __name__, str(source), str(temp),
                               str(os.getpid())],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=BUILD_SECONDS, check=False)
        if made.returncode != 0 or not (temp / GRAPH).is_file():
            return None
        kept = directory / f"{PREFIX}{key}-{digest_of(temp)}"
        try:
            temp.rename(kept)
        except OSError:  # the same copy, kept by another worker's build meanwhile
            if not (kept / GRAPH).is_file():
                return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        remove(temp)
    for old in directory.glob(f"{PREFIX}*"):
        if old != kept:
            remove(old)
    return kept / GRAPH


# How long the optimizing load may take (about a second on a small box).
BUILD_SECONDS = 300
PR_SET_PDEATHSIG = 1
M_TRIM_THRESHOLD = -1  # mallopt's parameter number (malloc.h)


# The ONNX fields read and written here (onnx.proto): ModelProto.graph; GraphProto's
# node and output; NodeProto's input, output, name, op_type, attribute; AttributeProto's
# name, i and type (2: an int); TensorProto.DataType FLOAT.
GRAPH_FIELD, NODE, GRAPH_OUTPUT = 7, 1, 12
INPUT, OUTPUT, NAME, OP_TYPE, ATTRIBUTE = 1, 2, 3, 4, 5
ATTRIBUTE_NAME, ATTRIBUTE_INT, ATTRIBUTE_TYPE, INT, FLOAT = 1, 3, 20, 2, 1


def node(op: str, inputs: list[str], output: str, name: str, cast_to: int = 0) -> bytes:
    """A NodeProto of the default domain (`cast_to`: a Cast's `to` attribute)."""
    out = b"".join(field(INPUT, i.encode()) for i in inputs)
    out += field(OUTPUT, output.encode()) + field(NAME, name.encode()) + field(OP_TYPE,
                                                                                op.encode())
    if cast_to:
        out += field(ATTRIBUTE, field(ATTRIBUTE_NAME, b"to") + field(ATTRIBUTE_INT, cast_to)
                     + field(ATTRIBUTE_TYPE, INT))
    return field(NODE, out)


def rows_axis(gather: memoryview) -> bool:
    """Whether a Gather node looks up rows (its axis 0, said or not)."""
    for number, value, _ in spans(gather):
        if number == ATTRIBUTE and isinstance(value, memoryview):
            parts = dict((p, v) for p, v, _ in spans(value))
            name = parts.get(ATTRIBUTE_NAME)
            if isinstance(name, memoryview) and bytes(name) == b"axis" \
                    and parts.get(ATTRIBUTE_INT, 0) != 0:
                return False
    return True


def rows_looked_up(model: bytes) -> bytes | None:
    """The shipped model with its word vectors left int8: where it turned the whole
    table into floats (Cast, then Mul by each row's scale) and then looked rows up
    (Gather by the input ids), it looks up the int8 rows and their scales and turns only
    those into floats. Each element is the same product of the same two numbers, so the
    vectors are the same, bit for bit; the optimizing load no longer folds 47 MB of
    floats, nor does a pass map them. None where the graph is not as expected."""
    data = memoryview(model)
    graph = next((g for n, g, _ in spans(data) if n == GRAPH_FIELD), None)
    if not isinstance(graph, memoryview):
        return None
    nodes: list[tuple[memoryview, dict[int, list[str]], str]] = []
    outputs: set[str] = set()
    for number, value, raw in spans(graph):
        if number == NODE and isinstance(value, memoryview):
            parts: dict[int, list[str]] = {INPUT: [], OUTPUT: [], OP_TYPE: []}
            for part, text in ((p, t) for p, t, _ in spans(value) if p in parts):
                parts[part].append(bytes(text).decode() if isinstance(text, memoryview)
                                   else "")
            nodes.append((raw, parts, "".join(parts[OP_TYPE])))
        elif number == GRAPH_OUTPUT and isinstance(value, memoryview):
            outputs.update(bytes(t).decode() for p, t, _ in spans(value)
                           if p == 1 and isinstance(t, memoryview))

    def users(name: str) -> list[int]:
        return [i for i, (_, parts, _) in enumerate(nodes) if name in parts[INPUT]]

    cast = [i for i, (_, parts, op) in enumerate(nodes)
            if op == "Cast" and parts[INPUT] == [f"{WORDS}_q"]]
    if len(cast) != 1 or len(floats := nodes[cast[0]][1][OUTPUT]) != 1:
        return None
    mul = users(floats[0])
    if len(mul) != 1 or nodes[mul[0]][2] != "Mul" \
            or sorted(nodes[mul[0]][1][INPUT]) != sorted([floats[0], f"{WORDS}_scale"]) \
            or nodes[mul[0]][1][OUTPUT] != [WORDS]:
        return None
    gather = users(WORDS)
    if len(gather) != 1 or WORDS in outputs or nodes[gather[0]][2] != "Gather" \
            or nodes[gather[0]][1][INPUT][0] != WORDS \
            or len(nodes[gather[0]][1][INPUT]) != 2 or not rows_axis(nodes[gather[0]][0]):
        return None
    ids, [looked_up] = nodes[gather[0]][1][INPUT][1], nodes[gather[0]][1][OUTPUT]
    rows = (node("Gather", [f"{WORDS}_q", ids], f"{looked_up}_q", f"{looked_up}_q")
            + node("Cast", [f"{looked_up}_q"], f"{looked_up}_f", f"{looked_up}_f",
                   cast_to=FLOAT)
            + node("Gather", [f"{WORDS}_scale", ids], f"{looked_up}_scale",
                   f"{looked_up}_scale")
            + node("Mul", [f"{looked_up}_f", f"{looked_up}_scale"], looked_up,
                   f"{looked_up}_rows"))
    changed = {cast[0]: b"", mul[0]: b"", gather[0]: rows}
    parts_out, at = [], 0
    for number, value, raw in spans(graph):
        if number == NODE and isinstance(value, memoryview):
            parts_out.append(changed.get(at, bytes(raw)))
            at += 1
        else:
            parts_out.append(bytes(raw))
    new_graph = b"".join(parts_out)
    return b"".join(field(GRAPH_FIELD, new_graph) if number == GRAPH_FIELD else bytes(raw)
                    for number, _, raw in spans(data))


def optimize(source: str, target: str) -> None:
    """Load the model at `source` as onnxruntime does by default, saving the optimized
    graph into the directory `target`, its weights in a file beside it (what `build`
    runs in its own process)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(Path(target) / GRAPH)
    # Every weight of a kilobyte or more goes to the weights file, which a load maps.
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", WEIGHTS)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    options.log_severity_level = 3  # its note that the graph suits this CPU only
    # The session is never run: its kernels need not pack the weights for runs (about
    # 17 MB at the end of the load). The graph it saves is the same, byte for byte.
    options.add_session_config_entry("session.disable_prepacking", "1")
    shipped = Path(source).read_bytes()
    model = rows_looked_up(shipped) or shipped
    del shipped
    ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


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

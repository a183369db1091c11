"""The embedded default: the real all-MiniLM-L6-v2 int8 model, offline, pinned by sha256."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dreamd.backends.local import MODEL_SHA256, LocalEmbedder, model_file, verified
from dreamd.backends.model_cache import GRAPH, PREFIX, WEIGHTS, cache_key, digest_of
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.errors import ModelFileError
from tests.helpers import ROOT, wait_for


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=2)


def test_vectors_are_unit_length_and_semantic(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(["The cat sits on the mat", "A feline rests on a rug",
                              "Stock markets fell sharply today"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > 0.4 > sims[0, 2] + 0.2


def test_batching_and_order_do_not_change_vectors(embedder: LocalEmbedder) -> None:
    texts = [f"sentence number {i} about {'dogs' if i % 2 else 'taxes'}" * (1 + i % 4)
             for i in range(40)]
    together = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in texts[:5]])
    assert np.allclose(together[:5], alone, atol=1e-4)


def test_a_glance_is_the_words_input_vectors_without_a_model_run(
        embedder: LocalEmbedder) -> None:
    """`glance`, for the facts' selector: the mean of a text's word pieces' input vectors
    from the model file, normalised; a bag of words (order does not change it), close
    for texts that share their words, and no run of the model."""
    runs = embedder.calls
    glances = embedder.glance(["my sister moved to Porto", "to Porto my sister moved",
                               "my sister moved to Lisbon", "thanks so much, have fun", ""])
    assert embedder.calls == runs
    assert glances.shape == (5, 384) and glances.dtype == np.float32
    assert np.allclose(np.linalg.norm(glances[:4], axis=1), 1.0, atol=1e-5)
    assert not glances[4].any()
    assert np.allclose(glances[0], glances[1], atol=1e-6)
    assert glances[0] @ glances[2] > glances[0] @ glances[3] + 0.2


def test_a_glance_keeps_the_word_vectors_and_not_the_model_file_mapped() -> None:
    """The glance's table (12 MB of int8 rows and their scales) is the process's own:
    the model file it was found in is not left mapped, where the scan for it paged in
    much of the rest of the file too (20 MB resident in a pass)."""
    code = ("import json; from dreamd.backends.local import LocalEmbedder, model_file; "
            "e = LocalEmbedder(threads=1, cache='off'); g = e.glance(['my sister moved']); "
            "maps = open('/proc/self/maps').read(); "
            "print(json.dumps([str(model_file()) in maps, float(g[0] @ g[0])]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True)
    mapped, norm = json.loads(run.stdout)
    assert not mapped and abs(norm - 1.0) < 1e-5


def test_a_file_without_word_vectors_fails_in_one_line(tmp_path: Path) -> None:
    from dreamd.backends.local import word_vectors

    for junk in (b"", b"\x3a\x04abcd", b"\xff\xff\xff"):
        path = tmp_path / f"{len(junk)}.onnx"
        path.write_bytes(junk)
        with pytest.raises(ModelFileError, match=r"word vectors|not an ONNX model"):
            word_vectors(path)


def test_a_changed_model_file_fails_loudly(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copy(model_file(), copy)
    assert verified(copy, MODEL_SHA256) == copy
    with copy.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(ModelFileError, match="differs from the pinned version"):
        verified(copy, MODEL_SHA256)


def test_extractive_gist_says_what_it_was_about_then_what_was_told(
    embedder: LocalEmbedder,
) -> None:
    from dreamd.dream.prompts import summary_prompt

    lines = [f"user: I planted {n} tomato plants in the garden" for n in range(3)] + [
        "assistant: ok", "user: My brother Tom visits from Porto next Friday.",
        "user: The dentist appointment is on the 14th at 9 am.", "assistant: Noted!"]
    prompt = summary_prompt({"user": "U", "agent": "A"}, None, lines, 3)
    completer = ExtractiveCompleter(embedder)
    first = completer.complete(prompt).text
    assert first == completer.complete(prompt).text
    about, *chosen = first.splitlines()
    # What the session was about, in its own spelling, then what its turns told, in the
    # third person by the speaker's name (the assistant's "ok" tells nothing).
    assert about.startswith("About: ") and {"Tom", "Porto"} <= set(about[7:].split(", "))
    assert len(chosen) == 2 and all(line.startswith("U ") for line in chosen), chosen
    assert not any("ok" in line.split() for line in chosen)
    # The next pass folds new turns into this gist: its topics are redone, not kept as
    # a line, and the gist stays within its size.
    later = summary_prompt({"user": "U", "agent": "A"}, first,
                           ["user: Tom and I went to Braga by train."], 3)
    again = completer.complete(later).text.splitlines()
    assert len(again) == 3 and sum(line.startswith("About: ") for line in again) == 1
    assert "Braga" in again[0] and "Tom" in again[0]


def test_a_gist_s_topics_name_who_it_was_about_not_who_was_talking(
    embedder: LocalEmbedder,
) -> None:
    from dreamd.dream.prompts import summary_prompt

    lines = ["user: First week as tech lead is done, Wren.",
             "assistant: Well done, Sam! How did it go?",
             "user: Ana lands on the 16th. Training is tapering now.",
             "user: Terrified is how I felt on Monday, but Sam survived."]
    prompt = summary_prompt({"user": "Sam", "agent": "Wren"}, None, lines, 3)
    about = ExtractiveCompleter(embedder).complete(prompt).text.splitlines()[0]
    # Ana opens a sentence as its subject: a topic. The user and the agent are in every
    # conversation of theirs: not topics; nor are a gerund or an adjective that open one.
    topics = about.removeprefix("About: ").split(", ")
    assert "Ana" in topics and not {"Sam", "Wren", "Training", "Terrified"} & set(topics), about


def test_the_offline_reflection_names_people_and_places_as_they_are_spelled(
    embedder: LocalEmbedder,
) -> None:
    import json

    from dreamd.dream.prompts import reflect_prompt

    lines = ["user: My sister Ana lands on the 16th of October.",
             "user: I'm showing Ana the flat in Campo de Ourique.",
             "user: Campo de Ourique is quiet and near the park.",
             "user: In October the rent goes up, so October is busy."]
    prompt = reflect_prompt({"user": "Sam", "agent": "Wren"}, {}, lines,
                            {"new_turns": 4, "sessions": 1, "now": "2026-10-05T21:00:00+00:00"})
    state = json.loads(ExtractiveCompleter(embedder).complete(prompt).text)
    # Names whole and first; a month is not a topic, nor a word of a longer name.
    assert state["topics"][:2] == ["Ana", "Campo de Ourique"], state
    assert not {"October", "Ourique", "Campo"} & set(state["topics"]), state
    assert "mostly about Ana and Campo de Ourique" in state["reflection"]


def test_a_change_replaces_the_fact_it_is_about_and_no_other(
        embedder: LocalEmbedder, tmp_path: Path) -> None:
    """Supersession by the embedder: "I switched to tea" ends "drinks coffee every
    morning" (its nearest fact of the same person), and leaves the dog alone."""
    from datetime import UTC, datetime, timedelta

    from dreamd.config import Config, UserConfig
    from dreamd.dream.cycle import run_pass
    from dreamd.store.facts import facts_of
    from dreamd.store.opening import open_store
    from tests.helpers import add_turns, make_chat_file

    db = tmp_path / "m.db"
    app = make_chat_file(db)
    t0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    add_turns(app, "s1", ["I drink coffee every morning before work.", "Nice ritual.",
                          "I adopted a dog called Biscuit last week.", "Lovely!"], start=t0)
    add_turns(app, "s2", ["I switched to tea in the mornings, coffee made me jittery.",
                          "Good call."], start=t0 + timedelta(days=40))
    app.close()
    config = Config(db=str(db), user=UserConfig(name="Sam"))
    store = open_store(config)
    run_pass(store, config, embedder, ExtractiveCompleter(embedder), trigger="test",
             force=True, clock=lambda: t0 + timedelta(days=60))
    with store.read() as conn:
        facts = {f.statement: f for f in facts_of(conn, "default")}
    store.close()
    coffee = next(f for s, f in facts.items() if "coffee every morning" in s)
    tea = next(f for s, f in facts.items() if "switched to tea" in s)
    dog = next(f for s, f in facts.items() if "Biscuit" in s)
    assert coffee.replaced_by == tea.id and coffee.valid_to is not None, facts
    assert tea.current and dog.current


EMBED_ONCE = """
import json, sys
from dreamd.backends.local import LocalEmbedder
embedder = LocalEmbedder(threads=1, cache=sys.argv[1])
vector = embedder.embed(["Rui gave me my first saxophone twelve years ago."])[0]
with open("/proc/self/maps") as maps:  # the files this process maps, as the kernel tells
    fields = [line.split(None, 5) for line in maps]
mapped = sorted({f[5].strip() for f in fields if len(f) == 6})
print(json.dumps({"from": str(embedder.loaded_from), "vector": vector.tolist(),
                  "mapped": mapped}))
"""


def embed_mapping(cache: Path) -> tuple[str, np.ndarray, list[str]]:
    """A process of its own embeds one text: the file its model came from, the vector,
    and the files it maps once it has."""
    run = subprocess.run([sys.executable, "-c", EMBED_ONCE, str(cache)], capture_output=True,
                         text=True, timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    out = json.loads(run.stdout)
    return out["from"], np.array(out["vector"], dtype=np.float32), out["mapped"]


def embed_in_a_process(cache: Path) -> tuple[str, np.ndarray]:
    """A process of its own embeds one text: the file its model came from, the vector."""
    where, vector, _ = embed_mapping(cache)
    return where, vector


def test_the_kept_copy_s_weights_are_mapped_not_read_into_the_process(
        tmp_path: Path) -> None:
    """A process that loads the kept copy maps its weights from the file, where the
    kernel pages in what the runs touch and can drop it again, instead of reading them
    into memory of its own (a copy of the file being parsed beside the weights made
    from it was the peak of a pass's load)."""
    cache = tmp_path / "cache"
    embed_in_a_process(cache)  # builds the kept copy
    where, _, mapped = embed_mapping(cache)
    weights = [Path(m) for m in mapped if Path(m).is_relative_to(cache)]
    assert Path(where).is_relative_to(cache) and weights, mapped
    assert max(w.stat().st_size for w in weights) > 40_000_000  # the model's weights


def test_a_second_process_loads_the_model_the_first_optimized(tmp_path: Path) -> None:
    """The first load optimizes the shipped model in a process of its own and keeps the
    result under its key (the runtime, the model, the CPU) and its own digest, then
    loads it; the next process loads that same file, left as it was, and embeds the
    same vectors. A kept file that was damaged is never loaded: it is replaced. Where
    nothing can be kept, the shipped model is loaded as before."""
    import onnxruntime

    cache = tmp_path / "cache"
    first, expected = embed_in_a_process(cache)
    kept = list(cache.iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in kept] == [
        f"{PREFIX}{cache_key(onnxruntime.__version__)}"]
    assert kept[0].name.endswith(digest_of(kept[0])) and first == str(kept[0] / GRAPH)
    made = (kept[0] / WEIGHTS).stat()
    second, vector = embed_in_a_process(cache)
    assert second == str(kept[0] / GRAPH) and np.allclose(vector, expected, atol=1e-5)
    weights = (kept[0] / WEIGHTS).stat()
    assert (weights.st_ino, weights.st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    _, shipped = embed_in_a_process(Path("off"))  # "off": nothing kept, nothing read
    assert np.allclose(shipped, expected, atol=1e-5)

    data = bytearray((kept[0] / WEIGHTS).read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of a weight: the runtime would read it
    (kept[0] / WEIGHTS).write_bytes(bytes(data))
    third, vector = embed_in_a_process(cache)
    rebuilt = list(cache.iterdir())
    assert len(rebuilt) == 1 and rebuilt[0].name.endswith(digest_of(rebuilt[0]))
    assert third == str(rebuilt[0] / GRAPH) and np.allclose(vector, expected, atol=1e-5)
    (rebuilt[0] / GRAPH).write_bytes(b"not a model")  # cut short, its name kept: refused
    assert embed_in_a_process(cache)[0] == str(rebuilt[0] / GRAPH)
    assert (rebuilt[0] / GRAPH).stat().st_size > 10_000
    (rebuilt[0] / WEIGHTS).unlink()  # a file of it gone: built again
    assert embed_in_a_process(cache)[0] == str(rebuilt[0] / GRAPH)
    assert (rebuilt[0] / WEIGHTS).stat().st_size > 1_000_000

    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache directory cannot be made
    where, vector = embed_in_a_process(blocked)
    assert where == str(model_file()) and np.allclose(vector, expected, atol=1e-5)


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def test_a_build_killed_midway_leaves_no_file_behind(tmp_path: Path) -> None:
    """A process killed while it builds the model's copy (SIGKILL: nothing of its own
    runs) leaves its build's directory: its builder dies with it, and the next look at
    the cache removes what it left. A build under way in another
    process (alive, its file young) is left alone; a file older than any build may run
    is removed whoever made it."""
    from dreamd.backends.model_cache import BUILD_SECONDS, cached_model

    cache = tmp_path / "cache"
    code = ("import sys; from pathlib import Path; from dreamd.backends.model_cache import "
            "build; from dreamd.backends.model_files import model_file; "
            "build(Path(sys.argv[1]), 'k', model_file())")
    building = subprocess.Popen([sys.executable, "-c", code, str(cache)], cwd=ROOT)
    builders: list[int] = []

    def started() -> bool:
        builders[:] = children_of(building.pid)
        return bool(builders)

    assert wait_for(started, 120, step=0.005)
    [left] = list(cache.glob(".building-*"))
    assert builders and left.name.startswith(f".building-{building.pid}-")
    os.kill(building.pid, signal.SIGKILL)
    building.wait()
    assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in builders), 120)
    assert left.is_dir()
    assert cached_model(cache, "k") is None and list(cache.iterdir()) == []

    other = subprocess.Popen(["sleep", "60"])  # a second daemon, building
    try:
        theirs = cache / f".building-{other.pid}-x1"
        mine = cache / f".building-{os.getpid()}-x2"
        stuck = cache / f".building-{other.pid}-x3"
        for path in (theirs, mine, stuck):
            path.mkdir()
            (path / GRAPH).write_bytes(b"part of a model")
        long_ago = time.time() - BUILD_SECONDS - 60
        os.utime(stuck, (long_ago, long_ago))
        assert cached_model(cache, "k") is None
        assert sorted(cache.iterdir()) == sorted([theirs, mine])
    finally:
        other.kill()
        other.wait()


def test_the_kept_copy_embeds_what_the_shipped_model_does_bit_for_bit(
        tmp_path: Path) -> None:
    """However the builder gets there (its weights folded apart from the runtime, its
    session never run, its heap trimmed), the kept copy embeds texts of every length
    into the very vectors the shipped model's default load does."""
    texts = ["Rui gave me my first saxophone twelve years ago.", "ok", "Fine, thanks!",
             " ".join(["The ferry to the island left at dawn and we nearly missed it"] * 30)]
    code = ("import json, sys; from dreamd.backends.local import LocalEmbedder; "
            "e = LocalEmbedder(threads=1, cache=sys.argv[1]); "
            "v = e.embed(json.loads(sys.argv[2])); "
            "print(json.dumps({'from': str(e.loaded_from), 'v': v.tolist()}))")
    got = {}
    for cache in ("off", str(tmp_path / "cache"), str(tmp_path / "cache")):
        run = subprocess.run([sys.executable, "-c", code, cache, json.dumps(texts)],
                             capture_output=True, text=True, timeout=300, cwd=ROOT, check=True)
        out = json.loads(run.stdout)
        got[out["from"]] = np.array(out["v"], dtype=np.float32)
    [shipped, kept] = got  # the second and third loads read the same kept copy
    assert shipped == str(model_file()) and Path(kept).is_relative_to(tmp_path / "cache")
    assert np.array_equal(got[shipped], got[kept])


def test_the_kept_copy_keeps_the_word_vectors_as_int8_rows(tmp_path: Path) -> None:
    """The vocabulary's vectors (30,522 of them, most never looked up in a pass) stay
    int8 rows and a scale each in the kept copy: a run scales the rows it looks up, not
    the whole table at the build (47 MB of floats, the largest of the builder's folds,
    and then mapped whole by every pass that embeds)."""
    from dreamd.backends.local import WORDS
    from dreamd.backends.model_cache import build
    from dreamd.backends.protobuf import fields

    kept = build(tmp_path / "cache", "k", model_file())
    assert kept is not None
    names = set()
    for number, graph in fields(memoryview(kept.read_bytes())):
        if number == 7 and isinstance(graph, memoryview):
            for kind, tensor in fields(graph):
                if kind == 5 and isinstance(tensor, memoryview):
                    name = dict(fields(tensor))[8]
                    assert isinstance(name, memoryview)
                    names.add(bytes(name).decode())
    assert {f"{WORDS}_q", f"{WORDS}_scale"} <= names and WORDS not in names
    assert (kept.parent / WEIGHTS).stat().st_size < 60_000_000


def test_a_copy_kept_as_one_file_by_an_earlier_version_is_replaced(tmp_path: Path) -> None:
    """An earlier version kept the copy as one file of the graph and its float weights:
    the first process that embeds removes it and keeps the directory of two files."""
    import onnxruntime

    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / f"{PREFIX}{cache_key(onnxruntime.__version__)}-0123456789abcdef.onnx"
    old.write_bytes(b"a graph and its float weights")
    where, _ = embed_in_a_process(cache)
    assert not old.exists() and [p.name for p in cache.iterdir()] == [Path(where).parent.name]
    assert Path(where).name == GRAPH and (Path(where).parent / WEIGHTS).is_file()

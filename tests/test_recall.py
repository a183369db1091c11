"""Recall on a small handmade corpus: the right turns, scoping, an index kept in step."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.local import LocalEmbedder
from dreamd.config import Config, EmbedConfig
from dreamd.dream.cycle import run_pass
from dreamd.memory.api import Memory
from dreamd.memory.evidence import Evidence
from dreamd.memory.recall import VectorIndex, fuse, query_words, top_k
from tests.helpers import RecordingCompleter

CORPUS = {
    "pets": ["I adopted a scruffy terrier called Biscuit from the shelter",
             "Biscuit hides under my desk when it thunders"],
    "work": ["My manager Rui asked me to lead the routing team",
             "The database migration locked a huge table for four hours"],
    "travel": ["We are planning two weeks in Japan next April",
               "I booked a ryokan in Kyoto near the bamboo forest"],
}


def build(db: Path, embedder: object) -> Memory:
    memory = Memory(db, config=Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)  # type: ignore[arg-type]
    for session, texts in CORPUS.items():
        for text in texts:
            memory.remember(session, "user", text)
    completer = RecordingCompleter(memory.store, embedder=embedder)  # type: ignore[arg-type]
    run_pass(memory.store, memory.config, embedder, completer, trigger="test",  # type: ignore[arg-type]
             force=True)
    return memory


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder(threads=2)


@pytest.mark.parametrize(
    ("query", "session", "words"),
    [("what is the name of my dog?", "pets", "Biscuit"),
     ("who is my boss at work", "work", "Rui"),
     ("where will I stay in Kyoto", "travel", "ryokan"),
     ("the outage caused by a schema change", "work", "migration")],
)
def test_semantic_recall_finds_the_turn(tmp_path: Path, local: LocalEmbedder, query: str,
                                        session: str, words: str) -> None:
    memory = build(tmp_path / "m.db", local)
    [best] = memory.recall(query, k=1)
    assert best.session_id == session and words in best.content
    memory.close()


def test_session_scope_only_returns_that_session(tmp_path: Path) -> None:
    memory = build(tmp_path / "m.db", HashingEmbedder())
    hits = memory.recall("Biscuit terrier Japan Kyoto Rui", k=10, session="travel")
    assert hits and {h.session_id for h in hits} == {"travel"}
    memory.close()


def test_lexical_side_rescues_rare_words(tmp_path: Path) -> None:
    memory = build(tmp_path / "m.db", HashingEmbedder())
    assert memory.recall("ryokan", k=1)[0].content.startswith("I booked a ryokan")
    memory.close()


def test_index_grows_with_new_turns_and_drops_deleted_ones(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    memory = build(tmp_path / "m.db", embedder)
    memory.recall("anything", k=1)
    assert len(memory.index.ids) == 6
    new_id = memory.remember("pets", "user", "Biscuit learned to fetch a frisbee", embed=True)
    assert memory.recall("frisbee fetch", k=1)[0].exchange_id == new_id
    assert len(memory.index.ids) == 7  # grown, not reloaded
    # The app deletes a turn: it is never returned, though its vector is still loaded.
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    conn.execute("DELETE FROM exchanges WHERE id = ?", (new_id,))
    conn.close()
    assert all(h.exchange_id != new_id for h in memory.recall("frisbee fetch", k=10))
    # dreamd's own forgetting bumps the epoch: the matrix is rebuilt without the row.
    with memory.store.write() as w:
        w.execute("DELETE FROM dreamd_exchange_vectors WHERE exchange_id = ?", (new_id,))
        w.execute("INSERT OR REPLACE INTO dreamd_state VALUES ('vector_epoch', '1')")
    memory.recall("x", k=1)
    assert new_id not in set(memory.index.ids.tolist()) and len(memory.index.ids) == 6
    memory.close()


@pytest.mark.parametrize("text", ['"unbalanced', "NEAR(a b", "a AND OR NOT b", "*", "x:y"])
def test_user_text_is_never_fts_syntax(tmp_path: Path, text: str) -> None:
    memory = build(tmp_path / "m.db", HashingEmbedder())
    memory.recall(text, k=3)  # no sqlite3.OperationalError
    assert query_words('say "hi" NEAR(x)') == ["say", "hi", "near"]
    memory.close()


def test_fusion_and_top_k() -> None:
    fused = fuse({1: 0.9, 2: 0.5, 3: 0.1}, {3: 12.0, 4: 3.0})
    assert max(fused, key=fused.__getitem__) in (1, 3)
    assert set(fused) == {1, 2, 3, 4}
    assert top_k(np.array([0.1, 0.9, 0.5, 0.7]), 2).tolist() == [1, 3]
    assert top_k(np.array([0.2, 0.1]), 5).tolist() == [0, 1]


def test_turns_embedded_later_behind_an_early_one_are_found(tmp_path: Path) -> None:
    """A turn embedded at once (ahead of the daemon) must not hide older turns that the
    embed job reaches later."""
    embedder = HashingEmbedder()
    memory = build(tmp_path / "m.db", embedder)
    older = memory.remember("pets", "user", "Biscuit chewed my favourite slipper")
    memory.remember("pets", "user", "Biscuit met a cat called Miso", embed=True)
    memory.recall("anything", k=1)  # the index has seen the newer vector
    run_pass(memory.store, memory.config, embedder,
             RecordingCompleter(memory.store, embedder=embedder), trigger="test", force=True)
    assert memory.recall("chewed slipper", k=1, words_too=False)[0].exchange_id == older
    memory.close()


def test_user_scope_never_crosses_users(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    memory = build(tmp_path / "m.db", embedder)  # sessions of the default user
    with memory.store.write() as conn:
        conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                     "VALUES ('other-1', NULL, '2026-01-01', 'other')")
    memory.remember("other-1", "user", "My dog Biscuit is a poodle", embed=True)
    mine = memory.recall("dog Biscuit poodle", k=10, users=["default"])
    theirs = memory.recall("dog Biscuit poodle", k=10, users=["other"])
    assert mine and all(h.session_id != "other-1" for h in mine)
    assert [h.session_id for h in theirs] == ["other-1"]
    both = memory.recall("dog Biscuit poodle", k=10, users=["default", "other"])
    assert {"other-1", "pets"} <= {h.session_id for h in both}
    memory.close()


def test_index_of_vectors_stored_only_ahead_of_the_daemon(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    memory = Memory(tmp_path / "m.db", config=Config(db=str(tmp_path / "m.db"),
                                                     embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)
    first = memory.remember("s", "user", "only embedded by the app", embed=True)
    assert [h.exchange_id for h in memory.recall("embedded app", k=1)] == [first]
    assert memory.index.ids.tolist() == [first]
    memory.close()


def test_the_hashing_embedder_is_a_bag_of_signed_token_hashes_alone_or_in_a_batch() -> None:
    """The test and bench stand-in's vectors, as defined (each word and pair of words adds
    its sign at its slot, then the vector is normalised), whatever batch a text is in."""
    import hashlib
    import itertools
    import re

    def defined(text: str, dim: int) -> np.ndarray:
        vec = np.zeros(dim, dtype=np.float32)
        words = re.findall(r"[a-z0-9']+", text.lower())
        for token in words + [f"{a} {b}" for a, b in itertools.pairwise(words)]:
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            vec[int.from_bytes(digest[:4], "little") % dim] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0
            return vec
        return vec / norm

    texts = ["I moved to Porto in May.", "", "!!", "it's it's it's", "Mika, Mika and Mika",
             "How did row 3 turn out? " * 20]
    for dim in (16, 256):
        embedder = HashingEmbedder(dim)
        batch = embedder.embed(texts)
        assert batch.dtype == np.float32 and batch.shape == (len(texts), dim)
        for text, row in zip(texts, batch, strict=True):
            assert np.array_equal(row, defined(text, dim))
            assert np.array_equal(embedder.embed([text])[0], row)
    assert HashingEmbedder(16).embed([]).shape == (0, 16)


def test_scores_are_the_recipe_written_plainly_and_follow_new_facts(tmp_path: Path) -> None:
    """The index's vectorized scores against the recipe computed row by row: own +
    context, the session's best (or its gist's), the best of the facts a turn gave
    (never below nothing; facts in any order, one turn given several, a turn the
    matrix lacks). A fact added since the last query counts in the next one."""
    from dreamd.memory.recall import (
        CONTEXT_WEIGHT,
        FACT_WEIGHT,
        GIST_WEIGHT,
        SESSION_WEIGHT,
    )

    memory = build(tmp_path / "m.db", HashingEmbedder())
    index = memory.index
    index.refresh()
    rng = np.random.default_rng(7)
    query = rng.standard_normal(index.matrix.shape[1]).astype(np.float32)
    ids, codes = index.base_ids.tolist(), index.codes.tolist()
    gists = {index.sessions[codes[0]]: 0.9}
    turns = np.array([ids[3], ids[1], ids[3], ids[0], max(ids) + 100], dtype=np.int64)
    cosines = np.array([0.5, -0.4, 0.8, 0.1, 0.9], dtype=np.float32)

    def plainly(turns: np.ndarray, cosines: np.ndarray) -> list[float]:
        own = [float(index.matrix[i] @ query) for i in range(len(ids))]
        base = []
        for i in range(len(ids)):
            near = [j for j in range(len(ids)) if codes[j] == codes[i] and abs(j - i) <= 1]
            # (rows of a session are consecutive here: one conversation at a time)
            norm = float(np.linalg.norm(sum(index.matrix[j] for j in near)))
            base.append(own[i] + CONTEXT_WEIGHT * sum(own[j] for j in near) / norm)
        out = []
        for i in range(len(ids)):
            session = [base[j] for j in range(len(ids)) if codes[j] == codes[i]]
            best = max([*session, GIST_WEIGHT * gists.get(index.sessions[codes[i]], -9)])
            fact = max([0.0, *(float(c) for t, c in zip(turns, cosines, strict=True)
                               if t == ids[i])])
            out.append(base[i] + SESSION_WEIGHT * best + FACT_WEIGHT * fact)
        return out

    assert index.scores(query, gists, Evidence.of(turns, cosines)) == pytest.approx(
        plainly(turns, cosines), abs=1e-5)
    assert index.scores(query, gists, Evidence.of(turns, cosines)) == pytest.approx(
        plainly(turns, cosines), abs=1e-5)  # asked again: the same
    more = np.append(turns, ids[5])
    more_cosines = np.append(cosines, np.float32(0.7))
    assert index.scores(query, gists, Evidence.of(more, more_cosines)) == pytest.approx(
        plainly(more, more_cosines), abs=1e-5)
    memory.close()


def straightforward(index: VectorIndex, query: np.ndarray, gists: dict[str, float],
                    facts: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The recipe's vector side in the plainest numpy, in float32 with the same operations
    in the same order as `VectorIndex.scores`: each neighbour gathered by its link, the
    session's best by a scatter, each fact matched to its row by a dictionary."""
    from dreamd.memory.recall import FACT_WEIGHT, GIST_WEIGHT, SESSION_WEIGHT

    own = index.matrix @ query
    padded = np.append(own, np.float32(0))  # a missing neighbour (-1) counts 0
    self_weight, context_weight = index.context_weights()
    score = (padded[index.prev] + padded[index.next]) * context_weight + own * self_weight
    best = np.full(len(index.sessions), -np.inf, dtype=np.float32)
    np.maximum.at(best, index.codes, score)
    for session, cosine in gists.items():
        code = index.sessions.index(session)
        best[code] = max(best[code], GIST_WEIGHT * cosine)
    best *= SESSION_WEIGHT
    score += best[index.codes]
    row_of = {int(t): r for r, t in enumerate(index.base_ids)}
    shares: dict[int, np.float32] = {}
    for turn, cosine in zip(facts[0].tolist(), facts[1], strict=True):
        if turn in row_of:
            row = row_of[turn]
            shares[row] = max(shares.get(row, np.float32(0)), cosine)
    for row, share in shares.items():
        score[row] += np.float32(FACT_WEIGHT) * share
    extra = [np.frombuffer(r[1], dtype=np.float32) for r in index._extra]
    if extra:
        score = np.concatenate([score, 2 * (np.stack(extra) @ query)])
    result: np.ndarray = score
    return result


def of_words(tmp_path: Path, turns: int, length: int, rng: np.random.Generator,
             session_of: Callable[[int], str]) -> tuple[Memory, HashingEmbedder]:
    """A memory of `turns` turns of `length` words drawn from a few, each in the session
    `session_of` its number gives, passed once (hashing embedder)."""
    embedder = HashingEmbedder()
    db = tmp_path / "m.db"
    memory = Memory(db, config=Config(db=str(db), embed=EmbedConfig(backend="hashing")),
                    embedder=embedder)
    words = "dog park rain coffee train sister guitar paint bread winter lake".split()
    for n in range(turns):
        memory.remember(session_of(n), "user" if n % 2 else "assistant",
                        " ".join(rng.choice(words, length)))
    run_pass(memory.store, memory.config, embedder,
             RecordingCompleter(memory.store, embedder=embedder), trigger="test", force=True)
    return memory, embedder


@pytest.mark.parametrize("interleaved", [False, True])
def test_scores_are_exactly_the_straightforward_computation(tmp_path: Path,
                                                            interleaved: bool) -> None:
    """Not close: equal, bit for bit, whatever shortcut the index takes for the usual
    layout (a session's turns one after another, one fact a turn) — for sessions one at a
    time and for sessions interleaved (a user in two chats at once, a session taken up
    again later), facts in turn order and not, several facts for one turn, a fact for a
    turn the matrix lacks, turns embedded ahead of the daemon."""
    rng = np.random.default_rng(11)
    sessions = [f"s{n}" for n in range(6)]
    memory, embedder = of_words(tmp_path, 90, 5, rng, lambda n: sessions[
        int(rng.integers(6)) if interleaved else n // 15])
    memory.remember(sessions[0], "user", "a turn the app embedded itself", embed=True)
    index = memory.index
    index.refresh()
    assert len(index.base_ids) == 90 and len(index._extra) == 1
    ids = index.base_ids
    query = embedder.embed(["coffee in the rain with my sister"])[0]
    gists = {sessions[1]: 0.4, sessions[4]: -0.2}
    many = np.sort(np.concatenate([rng.choice(ids, 40), [ids[-1] + 50]]))  # repeats too
    one_each = np.sort(rng.choice(ids, 30, replace=False))
    for turns in (many, one_each, many[::-1].copy()):
        cosines = rng.uniform(-0.5, 0.9, len(turns)).astype(np.float32)
        for _ in range(2):  # the second time from what the index kept of the first
            assert np.array_equal(index.scores(query, gists, Evidence.of(turns, cosines)),
                                  straightforward(index, query, gists, (turns, cosines)))
    assert np.array_equal(index.scores(query), straightforward(
        index, query, {}, (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))))
    memory.close()


@pytest.mark.parametrize("several", [False, True])
def test_the_best_are_the_same_when_only_the_shares_that_could_move_them_are_taken(
        tmp_path: Path, several: bool) -> None:
    """A recall takes a fact's cosine only for a turn within the facts' largest share of
    a set's k-th score (the candidates, the period's candidates): every set it takes is
    the one every share would give, for any k, with a mask and without, one fact a turn
    in order or several a turn; and most cosines are never taken."""
    rng = np.random.default_rng(5)
    memory, embedder = of_words(tmp_path, 400, 4, rng, lambda n: f"s{n // 20}")
    index = memory.index
    index.refresh()
    ids = index.base_ids
    turns = np.sort(rng.choice(ids, 300, replace=several))
    vectors = rng.standard_normal((len(turns), index.matrix.shape[1])).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = embedder.embed(["rain in the park with my sister"])[0]
    asked: list[int] = []

    def cosine(pairs: np.ndarray | None) -> np.ndarray:
        picked = vectors if pairs is None else vectors[pairs]
        asked.append(len(picked))
        result: np.ndarray = picked @ query
        return result

    facts = Evidence(turns, cosine, 1.0)
    every = index.scores(query, None, facts)
    half = np.arange(len(ids)) % 2 == 0
    for k in (1, 5, 20):
        for allowed in (None, half):
            asked.clear()
            score = index.scores(query, None, facts, [(allowed, k)])
            among = every if allowed is None else np.where(allowed, every, -np.inf)
            mine = score if allowed is None else np.where(allowed, score, -np.inf)
            assert np.array_equal(top_k(mine, k), top_k(among, k))
            assert np.array_equal(mine[top_k(mine, k)], among[top_k(among, k)])
            if k < 20:
                assert sum(asked) < len(turns) / 4
    memory.close()

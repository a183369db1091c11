"""A fleet of workers on one PostgreSQL store writes at once: a write waits only for a
write that changes what it changes (the same user's memory, or a write alone), and the
rows every worker shares stay whole under many writers at once."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from dreamd.config import Config, StoreConfig
from dreamd.dream.sensing import OWNERS_KEY, sync_owners
from dreamd.errors import StoreBusy
from dreamd.ids import user_key
from dreamd.store.failure import engine_errors, engine_failure
from dreamd.store.interface import Store
from dreamd.store.opening import open_store
from dreamd.store.postgres import schema as pg_schema
from dreamd.store.runs import failures, finish_run, record_failure, start_run
from dreamd.store.state import get_state, next_seq, raise_state
from dreamd.store.tally import sync_tally
from dreamd.store.tiers import save_gist, save_self_state, self_state
from dreamd.store.turns import dirty_sessions
from tests.engines import App
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent


def opened(url: str, timeout_ms: int = 5000) -> Store:
    return open_store(Config(db=url, store=StoreConfig(busy_timeout_ms=timeout_ms)))


def two_users(url: str) -> App:
    opened(url).close()  # dreamd's tables
    app = App(url)
    for user in ("ana", "ben"):
        app.session(f"{user}-1", user)
        app.say(f"{user}-1", [("user", f"I am {user} and I moved to Porto in May."),
                              ("assistant", "How do you like it there?")])
    return app


def gist(conn: Any, session: Any) -> bool:
    return save_gist(conn, session=session, content=f"{session.user_id} moved to Porto.",
                     last_exchange_id=session.last_id, turns_covered=session.turns,
                     source="extractive:test", created_at="2024-03-02T10:00:00+00:00",
                     embedding=None, vector=None, model="hashing")


def gives_up(store: Store, *keys: str, alone: bool = False) -> bool:
    """Whether a write naming `keys` gave up waiting for a lock (past the store's lock
    timeout)."""
    try:
        with store.write(*keys, alone=alone):
            pass
    except engine_errors() as exc:
        assert isinstance(engine_failure(exc), StoreBusy), exc
        return True
    return False


def test_a_write_waits_only_for_a_write_of_the_same_user(pg_server: Any) -> None:
    """One worker's write of ana's memory is held open; another worker's write of ben's
    commits meanwhile (the numbering of gists included). A write of ana's, or a write
    alone, waits for it: with a short lock timeout, each gives up."""
    url = pg_server.new_database()
    app = two_users(url)
    first, second = opened(url), opened(url, timeout_ms=300)
    sync_tally(first)
    with first.read() as conn:
        sessions = {s.user_id: s for s in dirty_sessions(conn)}
    with first.write(user_key("ana")) as conn:
        assert gist(conn, sessions["ana"])
        with second.write(user_key("ben")) as other:
            assert gist(other, sessions["ben"])
        # Committed while ana's write is still open: the app sees it.
        assert app.rows("SELECT user_id FROM summaries") == [("ben",)]
        assert gives_up(second, user_key("ana"))
        assert gives_up(second, alone=True)
        assert not gives_up(second, user_key("ben"))
    assert sorted(app.rows("SELECT user_id FROM summaries")) == [("ana",), ("ben",)]
    # Each user's gists are numbered in the order they committed (see PgDialect.next_seq).
    seqs = dict(app.rows("SELECT user_id, dreamd_seq FROM summaries"))
    assert seqs["ana"] != seqs["ben"]
    with second.write(user_key("ana")) as conn:  # ana's lock went with the commit
        assert next_seq(conn) > max(seqs.values())
    first.close()
    second.close()
    app.close()


def test_the_owner_check_is_left_to_the_worker_at_it(pg_server: Any) -> None:
    """While one worker takes the owner queue's entries off, another does not wait for
    it: it goes on, and the first finishes."""
    url = pg_server.new_database()
    app = two_users(url)
    first, second = opened(url), opened(url, timeout_ms=300)
    assert sync_tally(second) == 4
    with first.write() as conn:
        assert first.take(conn, OWNERS_KEY)
        assert sync_owners(second, "assistant") == 0  # would give up if it waited
    assert app.value("SELECT COUNT(*) FROM dreamd_owner_queue") > 0
    sync_owners(second, "assistant")
    assert app.value("SELECT COUNT(*) FROM dreamd_owner_queue") == 0
    first.close()
    second.close()
    app.close()


WRITERS = 16
ROUNDS = 12


def test_shared_rows_stay_whole_under_16_writers(pg_server: Any) -> None:
    """16 writers at once, each on a connection of its own and with a user of its own,
    beside an app adding turns: each round draws numbers for derived rows, records a
    pass, counts a failure of one shared item, folds new turns into the tally, raises a
    shared mark, and adds one to a counter in the agent's self-state by reading it and
    writing it back only if unchanged. No number is drawn twice, no count is lost, the
    tally counts each turn once, and the mark is the highest any writer raised it to."""
    url = pg_server.new_database()
    app = two_users(url)
    for n in range(WRITERS):
        app.session(f"live-{n}", f"u{n}")
    stores = [opened(url) for _ in range(WRITERS)]
    seqs: list[list[int]] = [[] for _ in range(WRITERS)]
    raised: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS + 1)

    def writer(n: int) -> None:
        store = stores[n]
        try:
            start.wait()
            for round_ in range(ROUNDS):
                with store.write(user_key(f"u{n}")) as conn:
                    seqs[n] += [next_seq(conn) for _ in range(3)]
                with store.write() as conn:
                    run = start_run(conn, "test", n, "2024-03-02T10:00:00+00:00", f"w{n}")
                    record_failure(conn, "embed", "batch:common", "down", "2024-03-02T10:00:00",
                                   "2024-03-02T10:01:00", False)
                    mark = n * ROUNDS + round_
                    raise_state(conn, "probe", mark)
                    raised.append(mark)
                sync_tally(store)
                while True:
                    with store.read() as conn:
                        state = self_state(conn, "assistant")
                    data, updated_at = state if state else ({}, None)
                    data = {**data, "n": int(data.get("n", 0)) + 1}
                    with store.write() as conn:
                        if save_self_state(conn, "assistant", data,
                                           f"2024-03-02T10:00:00.{n:02d}{round_:04d}",
                                           updated_at):
                            break
                with store.write() as conn:
                    finish_run(conn, run, outcome="ok")
        except BaseException as exc:  # reported by the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    start.wait()
    added = 0
    while any(t.is_alive() for t in threads):
        app.say(f"live-{added % WRITERS}", [("user", f"turn {added}")])
        added += 1
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert added > 0
    sync_tally(stores[0])

    drawn = [s for mine in seqs for s in mine]
    assert len(drawn) == WRITERS * ROUNDS * 3 == len(set(drawn))
    assert all(a < b for mine in seqs for a, b in itertools.pairwise(mine))
    with stores[0].read() as conn:
        state = self_state(conn, "assistant")
        assert state is not None and state[0]["n"] == WRITERS * ROUNDS
        [common] = failures(conn, "embed")
        assert common.attempts == WRITERS * ROUNDS
        assert int(get_state(conn, "probe") or 0) == max(raised)
    assert app.value("SELECT COUNT(*) FROM dreamd_runs WHERE outcome = 'ok'") == \
        WRITERS * ROUNDS
    tally = app.rows("SELECT t.session_id, t.turns, (SELECT COUNT(*) FROM exchanges e "
                     "WHERE e.session_id = t.session_id) FROM dreamd_sessions t")
    assert len(tally) == WRITERS + 2 and all(r[1] == r[2] for r in tally), tally
    for store in stores:
        store.close()
    app.close()


def test_an_older_schema_gets_the_sequence_past_every_number_used(pg_server: Any) -> None:
    """A database an older dreamd set up numbered derived rows from a row of its state:
    the upgrade starts the sequence after the highest number any row holds."""
    url = pg_server.new_database()
    store = opened(url)
    store.close()
    app = App(url)
    app.execute("DROP SEQUENCE dreamd_seq")
    app.execute("DELETE FROM dreamd_migrations WHERE version > ?", (pg_schema.BASE,))
    app.execute("INSERT INTO dreamd_state (key, value) VALUES ('seq', '41')")
    app.execute("INSERT INTO summaries (session_id, content, last_exchange_id, created_at, "
                "user_id, dreamd_seq) VALUES ('s', 'a gist', 1, '2024-03-01', 'ana', 57)")
    store = opened(url)
    with store.write() as conn:
        assert next_seq(conn) == 58
    store.close()
    assert app.value("SELECT MAX(version) FROM dreamd_migrations") == pg_schema.VERSION
    app.close()


def test_a_pass_claims_a_user_once_unless_its_worker_died(pg_server: Any) -> None:
    """A user another worker claimed and released after a pass began is done: that pass
    passes it over. One whose worker died holding it (its lease ran out unreleased) is
    still work, and is claimed."""
    from dreamd.store import leases

    store = opened(pg_server.new_database())
    keys = [user_key(u) for u in ("ana", "ben", "cy")]
    try:
        since = leases.server_now(store)
        assert leases.claim(store, "b", keys[:1], 1, 60.0) == keys[:1]
        leases.release(store, "b", keys[:1])  # b did ana's work
        assert leases.claim(store, "c", keys[1:2], 1, 0.05) == keys[1:2]  # c dies holding ben
        assert wait_for(lambda: lapsed(store, keys[1]), 30)
        assert leases.claim(store, "a", keys, 8, 60.0, since) == keys[1:]
        # Without a pass's clock, every free user is claimed.
        leases.release(store, "a", keys[1:])
        assert leases.claim(store, "d", keys, 8, 60.0) == keys
    finally:
        store.close()


def test_a_worker_takes_back_its_own_lease_and_extends_only_those_named(
        pg_server: Any) -> None:
    """A lease a worker still holds (its pass ended before it could hand it back) is free
    to that worker and to no other. A heartbeat extends the leases it names (those the
    running pass works on) and no others, and never one that ran out."""
    from dreamd.store import leases

    store = opened(pg_server.new_database())
    ana, ben = user_key("ana"), user_key("ben")
    try:
        assert leases.claim(store, "a", [ana, ben], 8, 60.0) == [ana, ben]
        assert leases.claim(store, "b", [ana, ben], 8, 60.0) == []
        assert leases.claim(store, "a", [ana, ben], 8, 2.0) == [ana, ben]
        assert leases.heartbeat(store, "a", 60.0, [ana]).held == 1
        assert wait_for(lambda: lapsed(store, ben), 30)
        assert not lapsed(store, ana)
        assert leases.heartbeat(store, "a", 60.0, [ana, ben]).held == 1  # ben ran out
        assert leases.claim(store, "b", [ana, ben], 8, 60.0) == [ben]
    finally:
        store.close()


def lapsed(store: Store, key: str) -> bool:
    """Whether the lease on `key` has run out (in the server's clock)."""
    with store.read() as conn:
        return bool(conn.execute("SELECT expires_at < now() FROM dreamd_leases WHERE key = ?",
                                 (key,)).fetchone()[0])

"""Faults a fleet survives on a real PostgreSQL. Two dreamd workers (daemons, real
subprocesses) and a chat app writing turns the whole time; new users' sessions arrive in
waves, and while the workers consolidate a wave the server restarts (fast or
immediate), the workers' connections are killed, the server is paused past the
workers' leases, or it is down for two minutes. After each fault both workers are alive
and the wave is consolidated within `BOUND` seconds of the server's return; at the end
every session is consolidated, each gist and each fact was written once, no lease is
left held, every pass says how it ended, and every turn the app was told it wrote is
there, once. The README's PostgreSQL section has the figures of a run."""

from __future__ import annotations

import functools
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dreamd.config import Config, EmbedConfig
from dreamd.memory.api import Memory
from testkit.openai_server import FakeOpenAI
from tests.engines import App
from tests.helpers import KEY, dreamd_env, wait_for

ROOT = Path(__file__).resolve().parent.parent
LEASE = 4  # workers.lease_seconds: a pause past it stays short
BOUND = 120.0  # seconds from the server's return within which a wave is consolidated
USERS_A_WAVE = 6

# The test's own record of every gist written: a gist written twice for the same turns is
# work done twice.
AUDIT = (
    "CREATE TABLE audit_gists (session_id TEXT NOT NULL, last_exchange_id BIGINT NOT NULL)",
    "CREATE FUNCTION audit_gist() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "
    "audit_gists VALUES (NEW.session_id, NEW.last_exchange_id); RETURN NULL; END $$",
    "CREATE TRIGGER audit_gist AFTER INSERT OR UPDATE ON summaries FOR EACH ROW "
    "EXECUTE FUNCTION audit_gist()",
)


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    app = App(url)
    try:
        return app.rows(sql, params)
    finally:
        app.close()


def value(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    try:
        rows = query(url, sql, params)
    except psycopg.OperationalError:  # the server is still away, or starting
        return None
    return rows[0][0] if rows else None


@dataclass
class Fleet:
    """The chat app, the model server and two workers on one database."""

    url: str
    where: Path
    server: FakeOpenAI = field(default_factory=lambda: FakeOpenAI(delay=0.05).start())
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    writer: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.writer = subprocess.Popen(
            [sys.executable, "-m", "bench.chat_writer", self.url, "20",
             str(self.where / "stop"), str(self.where / "report.json"), "4"],
            cwd=ROOT, env=dreamd_env())
        env = dreamd_env(
            DREAMD_WORKERS__LEASE_SECONDS=str(LEASE), DREAMD_WORKERS__BATCH_USERS="2",
            DREAMD_SCHEDULE__MIN_INTERVAL_SECONDS="2",
            DREAMD_SCHEDULE__MAX_INTERVAL_SECONDS="10",
            DREAMD_SCHEDULE__WAKE_ON_TURNS_SECONDS="1",
            DREAMD_SUMMARIZE__IDLE_MINUTES="0.1", DREAMD_COMPLETER__BACKEND="openai",
            DREAMD_COMPLETER__BASE_URL=self.server.base_url,
            DREAMD_COMPLETER__MODEL="test-model", OPENAI_API_KEY=KEY)
        for n in range(2):
            with (self.where / f"worker{n}.log").open("w") as out:
                self.workers.append(subprocess.Popen(
                    [sys.executable, "-m", "dreamd", "--db", self.url], cwd=ROOT, env=env,
                    stdout=out, stderr=subprocess.PIPE, text=True))

    def alive(self, since: float) -> bool:
        """Both workers running, each with a heartbeat after `since` (epoch seconds)."""
        beating = value(self.url, "SELECT COUNT(*) FROM dreamd_workers WHERE "
                        "heartbeat_at > to_timestamp(?)", (since,))
        return all(w.poll() is None for w in self.workers) and beating == 2

    def warnings(self) -> list[str]:
        """The workers' warnings and errors so far, for a failure's message."""
        lines = []
        for n in range(len(self.workers)):
            for line in (self.where / f"worker{n}.log").read_text().splitlines():
                if '"warning"' in line or '"error"' in line:
                    lines.append(f"worker{n}: {line[:300]}")
        return lines[-40:]

    def stop_writer(self) -> dict[str, Any]:
        assert self.writer is not None
        (self.where / "stop").touch()
        self.writer.wait(timeout=60)
        report: dict[str, Any] = json.loads((self.where / "report.json").read_text())
        return report

    def stop(self) -> list[tuple[int, str]]:
        """SIGTERM each worker: its exit code and what it wrote to stderr."""
        if self.writer is not None and self.writer.poll() is None:
            (self.where / "stop").touch()
            self.writer.wait(timeout=60)
        ended = []
        for worker in self.workers:
            worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                _, err = worker.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                _, err = worker.communicate()
            ended.append((worker.returncode, err))
        self.server.stop()
        return ended


def set_up(url: str) -> None:
    """dreamd's tables and the test's audit. Commits wait for the server's log to reach
    its disk (the test server does not, for speed): a turn whose commit was acknowledged
    must outlive an immediate shutdown, as it does on any production server."""
    Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing"))).close()
    app = App(url)
    try:
        name = app.value("SELECT current_database()")
        app.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
        for statement in AUDIT:
            app.execute(statement)
    finally:
        app.close()


def add_wave(url: str, wave: int) -> list[str]:
    """New users with a session each, their turns in the past (idle: due for a gist)."""
    app = App(url)
    sessions = []
    for n in range(USERS_A_WAVE):
        session, user = f"wave{wave}-s{n}", f"wave{wave}-u{n}"
        app.session(session, user)
        app.turns(session, [f"I moved to Porto in May and adopted a cat called Mika{n}.",
                            "How is she settling in?",
                            f"She sleeps on the balcony; I run {n + 5} km on Sundays.",
                            "That sounds like a good routine.",
                            f"My sister Ana visits in June, wave {wave}.",
                            "Have a lovely visit."],
                  datetime(2024, 3, 1, 10, 0) + timedelta(days=wave))
        sessions.append(session)
    app.close()
    return sessions


def behind(url: str, sessions: list[str] | None = None) -> list[tuple[Any, ...]] | None:
    """The sessions (of `sessions`) not yet consolidated: a turn not tallied or not read
    for facts, a gist still due (a session is summarized whole once it is idle, and
    summarized again once `summarize.after` more turns came: a gist may leave fewer
    behind), a gist that is not the one its mark names, or no profile for its user;
    None while the server is away."""
    try:
        return query(
            url, "SELECT s.id, t.turns, t.summarized_turns, t.last_id, t.summarized_id, "
            "t.facts_id, g.last_exchange_id, p.id FROM sessions s LEFT JOIN "
            "dreamd_sessions t ON t.session_id = s.id LEFT JOIN summaries g ON "
            "g.session_id = s.id LEFT JOIN profile p ON p.id = 'user:' || s.user_id "
            "WHERE (?::text[] IS NULL OR s.id = ANY(?)) AND (t.session_id IS NULL "
            "OR t.turns < (SELECT COUNT(*) FROM exchanges e WHERE e.session_id = s.id) "
            "OR t.facts_id < t.last_id OR (t.summarized_id < t.last_id AND "
            "(t.summarized_id = 0 OR t.turns - t.summarized_turns >= ?)) "
            "OR g.last_exchange_id IS DISTINCT FROM t.summarized_id OR p.id IS NULL) "
            "ORDER BY s.id", (sessions, sessions, Config().summarize.after))
    except psycopg.OperationalError:
        return None


def consolidated(url: str, sessions: list[str] | None = None) -> bool:
    return behind(url, sessions) == []


def unindexed(url: str) -> list[tuple[Any, ...]] | None:
    """(id, session, has a vector, is in the words index) of each turn missing either;
    None while the server is away."""
    try:
        return query(url, "SELECT e.id, e.session_id, EXISTS (SELECT 1 FROM "
                     "dreamd_exchange_vectors v WHERE v.exchange_id = e.id), EXISTS "
                     "(SELECT 1 FROM dreamd_fts f WHERE f.id = e.id) FROM exchanges e "
                     "WHERE NOT EXISTS (SELECT 1 FROM dreamd_exchange_vectors v WHERE "
                     "v.exchange_id = e.id) OR NOT EXISTS (SELECT 1 FROM dreamd_fts f "
                     "WHERE f.id = e.id) ORDER BY e.id")
    except psycopg.OperationalError:
        return None


def holding(url: str) -> bool:
    """Whether a worker holds users now: a pass is at work."""
    return bool(value(url, "SELECT COUNT(*) FROM dreamd_leases WHERE key LIKE 'user:%' "
                      "AND expires_at > now()"))


@dataclass(frozen=True)
class Fault:
    """What happens to the server; `strike` returns when it answers again."""

    name: str
    strike: Callable[[Any, random.Random], None]


def restart(mode: str) -> Callable[[Any, random.Random], None]:
    return lambda pg, rng: pg.restart(down_for=rng.uniform(0.0, 3.0), mode=mode)


def killed(pg: Any, rng: random.Random) -> None:
    assert pg.terminate("dreamd") > 0


def paused(pg: Any, rng: random.Random) -> None:
    pids = pg.pause()
    try:
        time.sleep(2 * LEASE + rng.uniform(0.0, 2.0))  # every lease runs out meanwhile
    finally:
        pg.resume(pids)


FAULTS = {
    "restart_fast": Fault("restart_fast", restart("fast")),
    "restart_immediate": Fault("restart_immediate", restart("immediate")),
    "terminate": Fault("terminate", killed),
    "sigstop": Fault("sigstop", paused),
    "down_2_min": Fault("down_2_min", lambda pg, rng: pg.restart(down_for=120.0)),
}


@pytest.mark.heavy
@pytest.mark.parametrize(("fault", "times"), [
    ("restart_fast", 1), ("terminate", 1),
    pytest.param("restart_fast", 4, marks=pytest.mark.soak),
    pytest.param("restart_immediate", 4, marks=pytest.mark.soak),
    pytest.param("terminate", 4, marks=pytest.mark.soak),
    pytest.param("sigstop", 2, marks=pytest.mark.soak),
    pytest.param("down_2_min", 1, marks=pytest.mark.soak),
])
def test_the_fleet_survives(pg_server: Any, tmp_path: Path, fault: str, times: int) -> None:
    url = pg_server.new_database()
    set_up(url)
    rng = random.Random(f"{fault}-{times}")
    fleet = Fleet(url, tmp_path)
    fleet.start()
    recovered: list[float] = []
    try:
        for wave in range(times):
            sessions = add_wave(url, wave)
            # A random moment of a pass: once a worker holds users.
            assert wait_for(lambda: holding(url), 120, step=0.02), "no pass began"
            time.sleep(rng.uniform(0.0, 1.0))
            FAULTS[fault].strike(pg_server, rng)
            back, back_at = time.monotonic(), time.time()
            assert wait_for(functools.partial(consolidated, url, sessions), BOUND, step=0.2), (
                f"wave {wave} not consolidated within {BOUND:g} s of the server's return: "
                f"{behind(url, sessions)}", fleet.warnings())
            recovered.append(time.monotonic() - back)
            assert wait_for(functools.partial(fleet.alive, back_at), 30, step=0.2), \
                "a worker died or stopped beating"
        written = fleet.stop_writer()
        assert wait_for(lambda: consolidated(url) and unindexed(url) == [], BOUND, step=0.5), (
            f"left behind: {behind(url)}, {(unindexed(url) or [])[:20]}", fleet.warnings())
        # No lease outlives its pass: once the work is done, none is held.
        assert wait_for(lambda: not holding(url), 3 * LEASE, step=0.2), "a lease is kept"
    finally:
        ended = fleet.stop()
    for code, err in ended:
        assert code == 0 and "Traceback" not in err, err[-2000:]
    # Each pass says how it ended: none is left running, none failed or erred.
    outcomes = dict(query(url, "SELECT outcome, COUNT(*) FROM dreamd_runs GROUP BY outcome"))
    assert set(outcomes) <= {"ok", "partial", "store_away", "interrupted"}, (
        outcomes, [(error, [(j["job"], j.get("errors")) for j in json.loads(jobs or "[]")
                            if j.get("failed")])
                   for error, jobs in query(url, "SELECT error, jobs FROM dreamd_runs WHERE "
                                            "outcome NOT IN ('ok', 'partial', 'store_away', "
                                            "'interrupted')")])
    print(f"{fault} x{times}: recovered in {', '.join(f'{s:.1f}' for s in recovered)} s; "
          f"passes {outcomes}; app wrote {len(written['ids'])} turns, "
          f"{len(written['in_doubt'])} in doubt")
    exactly_once(url, written)


def exactly_once(url: str, written: dict[str, Any]) -> None:
    """No gist written twice for the same turns, no fact stored twice from one turn, one
    vector and one words entry per turn, and the app's turns all there, once."""
    assert query(url, "SELECT session_id, last_exchange_id FROM audit_gists GROUP BY "
                 "session_id, last_exchange_id HAVING COUNT(*) > 1") == []
    assert query(url, "SELECT f.user_id, f.statement, s.exchange_id FROM facts f JOIN "
                 "dreamd_fact_sources s ON s.fact_id = f.id GROUP BY 1, 2, 3 "
                 "HAVING COUNT(*) > 1") == []
    assert value(url, "SELECT COUNT(*) FROM facts") > 0
    assert unindexed(url) == []
    kept = dict(query(url, "SELECT id, content FROM exchanges WHERE session_id LIKE 'live-%'"))
    assert set(written["ids"]) <= set(kept), "a turn the app was told it wrote is gone"
    told = {kept[i] for i in written["ids"]}
    assert len(set(kept.values())) == len(kept), "a turn is there twice"
    assert set(kept.values()) <= told | set(written["in_doubt"])

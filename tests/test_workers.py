"""Many dreamd workers on one PostgreSQL database: each user consolidated once per
change, never by two workers at once, and a killed worker's users finished by others."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from dreamd.config import Config, EmbedConfig
from dreamd.memory.api import Memory
from tests.engines import App
from tests.helpers import dreamd_env, wait_for

ROOT = Path(__file__).resolve().parent.parent
USERS = 500


def populate(url: str, users: int = USERS) -> App:
    Memory(url, config=Config(db=url, embed=EmbedConfig(backend="hashing"))).close()
    app = App(url)
    app.execute("BEGIN")
    for n in range(users):
        user, session = f"u{n:03d}", f"s{n:03d}"
        app.execute("INSERT INTO sessions (id, name, created_at, user_id) VALUES (?, ?, ?, ?)",
                    (session, session, "2024-03-01T10:00:00+00:00", user))
        for i, text in enumerate((f"I adopted a cat called Mika{n} in Porto.",
                                  "How is Mika settling in?",
                                  f"I run {n % 40 + 5} kilometres every Sunday.",
                                  "That is a good habit.")):
            app.execute("INSERT INTO exchanges (session_id, role, content, created_at) "
                        "VALUES (?, ?, ?, ?)", (session, "user" if i % 2 == 0 else
                                                "assistant", text,
                                                f"2024-03-01T10:0{i}:00+00:00"))
    app.execute("COMMIT")
    return app


def workers(url: str, n: int, **env: str) -> list[subprocess.Popen[str]]:
    extra = {"DREAMD_WORKERS__BATCH_USERS": "8", "DREAMD_WORKERS__LEASE_SECONDS": "30",
             **env}
    return [subprocess.Popen([sys.executable, "-m", "dreamd", "--db", url, "--force"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dreamd_env(**extra), cwd=ROOT) for _ in range(n)]


def events(stderr: str) -> list[dict[str, Any]]:
    out = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def holds(logs: list[list[dict[str, Any]]]) -> dict[str, list[tuple[float, float, int]]]:
    """user -> (claimed, released, worker index) of every lease the workers logged."""
    out: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for w, log in enumerate(logs):
        opened: dict[str, float] = {}
        for e in log:
            if e["event"] == "lease_claimed":
                opened[e["user"]] = e["at"]
            elif e["event"] == "lease_released":
                out[e["user"]].append((opened.pop(e["user"]), e["at"], w))
        assert not opened, f"worker {w} left leases unreleased: {sorted(opened)[:5]}"
    return out


@pytest.mark.heavy
# Sixteen workers (eight to a core here) in make test; two and four with the long runs
# (make soak, which CI runs too).
@pytest.mark.parametrize("count", [pytest.param(2, marks=pytest.mark.soak),
                                   pytest.param(4, marks=pytest.mark.soak), 16])
def test_workers_share_500_users_each_consolidated_once(pg_server: Any, count: int) -> None:
    url = pg_server.new_database()
    app = populate(url)
    try:
        procs = workers(url, count)
        logs = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-2000:]
            logs.append(events(out))
        # Every session's gist covers its last turn, row by row.
        rows = app.rows("SELECT t.session_id, t.last_id, t.summarized_id, t.facts_id, "
                        "s.last_exchange_id FROM dreamd_sessions t "
                        "LEFT JOIN summaries s ON s.session_id = t.session_id")
        assert len(rows) == USERS
        behind = [r for r in rows if not r[1] == r[2] == r[3] == r[4]]
        assert behind == [], behind[:3]
        assert app.value("SELECT COUNT(*) FROM exchanges e WHERE NOT EXISTS (SELECT 1 FROM "
                         "dreamd_exchange_vectors v WHERE v.exchange_id = e.id)") == 0
        # Each piece of work was done once, whoever did it: summed over every worker's pass.
        done: dict[str, int] = defaultdict(int)
        for (jobs, outcome) in app.rows("SELECT jobs, outcome FROM dreamd_runs"):
            assert outcome == "ok"
            for job in json.loads(jobs):
                done[job["job"]] += job["done"]
        assert done["summarize"] == USERS and done["profile"] == USERS
        assert done["eras"] == USERS and done["narrative"] == USERS
        assert done["embed"] == 4 * USERS and done["facts"] == 4 * USERS
        assert done["reflect"] == USERS  # the agent reflects on each user once
        assert app.value("SELECT COUNT(*) FROM profile") == USERS
        # No user was ever held by two workers at once, and every worker had a share.
        leases = holds(logs)
        assert set(leases) == {f"u{n:03d}" for n in range(USERS)}
        for user, spans in leases.items():
            spans.sort()
            for (_, end, w1), (start, _, w2) in itertools.pairwise(spans):
                assert start >= end, f"{user} held by workers {w1} and {w2} at once"
        assert all(any(e["event"] == "lease_claimed" for e in log) for log in logs)
        # A user another worker has done since a pass began is not claimed again by that pass:
        # each user is visited about once per pass of the fleet, not once per worker (a
        # worker that starts late claims again what others claimed before it began: 1.2 per
        # user at 16 workers on a loaded box; 2 per user and more before).
        claims = app.value("SELECT SUM(claims) FROM dreamd_leases WHERE key LIKE 'user:%'")
    finally:
        app.close()
    assert claims <= USERS * 1.5, f"{claims} claims of {USERS} users by {count} workers"


@pytest.mark.heavy
@pytest.mark.soak
def test_killing_workers_mid_claim_loses_nothing(pg_server: Any, tmp_path: Path) -> None:
    """kill -9 of a worker holding leases, 50 times at random moments, beside a chat app
    writing over 100 turns a second across users and a worker that keeps going: no turn
    lost or duplicated, nothing torn, and every user caught up at the end."""
    import random
    import signal
    import time

    url = pg_server.new_database()
    app = populate(url, 40)
    stop, report = tmp_path / "stop", tmp_path / "report.json"
    writer = subprocess.Popen([sys.executable, "-m", "bench.chat_writer", url, "150",
                               str(stop), str(report), "30"], cwd=ROOT, env=dreamd_env())
    env = {"DREAMD_WORKERS__LEASE_SECONDS": "2", "DREAMD_WORKERS__BATCH_USERS": "4"}
    steady = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", url, "--loop", "0.3"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dreamd_env(**env), cwd=ROOT)
    rng = random.Random(7)
    killed_holding = 0
    try:
        for _ in range(50):
            victim = subprocess.Popen(
                [sys.executable, "-m", "dreamd", "--db", url, "--force"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=dreamd_env(**env), cwd=ROOT)
            # A random moment of its pass, once it holds users (or has finished): counted
            # from its first lease, since a busy machine may take seconds to start it.
            def holding(pid: int = victim.pid) -> int:
                return int(app.value("SELECT COUNT(*) FROM dreamd_leases WHERE worker LIKE ? "
                                     "AND expires_at > now()", (f"%:{pid}:%",)))

            wait_for(lambda: holding() > 0 or victim.poll() is not None, 120)  # noqa: B023
            time.sleep(rng.uniform(0.0, 1.2))
            held = holding()
            killed_holding += bool(held) and victim.poll() is None
            victim.send_signal(signal.SIGKILL)
            victim.wait()
    finally:
        stop.touch()
        writer.wait(timeout=30)
        steady.send_signal(signal.SIGTERM)
        steady.wait(timeout=300)
    assert steady.returncode == 0
    written = json.loads(report.read_text())
    assert not written["errors"]
    # The last victim's leases run out (the steady worker handed its own back): its users
    # are anyone's again.
    assert wait_for(lambda: app.value(
        "SELECT COUNT(*) FROM dreamd_leases WHERE expires_at > now()") == 0, 120)
    final = subprocess.run([sys.executable, "-m", "dreamd", "--db", url, "--force"],
                           capture_output=True, text=True, env=dreamd_env(**env), cwd=ROOT,
                           timeout=300)
    assert final.returncode == 0, final.stderr
    assert killed_holding >= 10, "the kills must land while workers hold leases"
    print(f"kill -9: 50 workers killed, {killed_holding} of them holding leases; writer "
          f"{len(written['ids'])} turns, 0 errors")
    # Nothing lost or duplicated: the app's rows are exactly what it wrote.
    ids = [r[0] for r in app.rows("SELECT id FROM exchanges WHERE session_id LIKE 'live-%'")]
    assert sorted(ids) == sorted(written["ids"])
    # Nothing torn: the tally counts each turn once, every turn has its vector and words,
    # every gist covers its session to the end, and no fact is stored twice.
    rows = app.rows("SELECT t.session_id, t.turns, (SELECT COUNT(*) FROM exchanges e WHERE "
                    "e.session_id = t.session_id), t.last_id, t.summarized_id, t.facts_id, "
                    "s.last_exchange_id FROM dreamd_sessions t "
                    "LEFT JOIN summaries s ON s.session_id = t.session_id")
    assert all(r[1] == r[2] for r in rows), [r for r in rows if r[1] != r[2]][:3]
    assert all(r[3] == r[4] == r[5] == r[6] for r in rows), [
        r for r in rows if not r[3] == r[4] == r[5] == r[6]][:3]
    assert app.value("SELECT COUNT(*) FROM exchanges e WHERE NOT EXISTS (SELECT 1 FROM "
                     "dreamd_exchange_vectors v WHERE v.exchange_id = e.id) OR NOT EXISTS "
                     "(SELECT 1 FROM dreamd_fts f WHERE f.id = e.id)") == 0
    assert app.value("SELECT COUNT(*) FROM (SELECT user_id, statement FROM facts WHERE "
                     "replaced_by IS NULL GROUP BY 1, 2 HAVING COUNT(*) > 1) d") == 0
    app.close()

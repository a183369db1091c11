"""dreamd's versioned migrations: each applied in one transaction with its record.

Migrations only add (tables, columns with defaults, indexes). The core tables keep the
names and columns of the prior-art layout, so a file made by that schema is adopted in
place; in a file dreamd creates, the embedding columns may be NULL because dreamd keeps
its own vectors per model in dreamd_* tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dreamd.ids import DEFAULT_USER
from dreamd.store.interface import Conn

CORE_TABLES = """
CREATE TABLE IF NOT EXISTS exchanges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    embedding BLOB,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_session_created ON exchanges(session_id, created_at);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    name TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS summaries (
    session_id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    embedding BLOB,
    last_exchange_id INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS profile (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    sessions_covered INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS eras (
    month TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    embedding BLOB,
    session_count INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS narrative (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS self_state (
    id TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""

_DREAMD_TABLES = """
CREATE TABLE dreamd_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- Per-session tally, grown incrementally from new exchanges only (never a full scan).
CREATE TABLE dreamd_sessions (
    session_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    turns INTEGER NOT NULL,
    first_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL,
    first_at TEXT NOT NULL,
    last_at TEXT NOT NULL,
    month TEXT NOT NULL,
    -- How far dreamd's gist covers; moves in the same transaction as the gist.
    summarized_id INTEGER NOT NULL DEFAULT 0,
    summarized_turns INTEGER NOT NULL DEFAULT 0
);
-- Only the sessions with unsummarized turns: sensing reads O(dirty), not O(sessions).
CREATE INDEX dreamd_sessions_dirty ON dreamd_sessions(
    user_id, last_at, turns, summarized_turns, summarized_id, last_id)
    WHERE last_id > summarized_id;
CREATE INDEX dreamd_sessions_user ON dreamd_sessions(user_id);
-- dreamd's own vectors, per embedding model: never mixed with the app's column.
CREATE TABLE dreamd_exchange_vectors (
    model TEXT NOT NULL,
    exchange_id INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, exchange_id)
) WITHOUT ROWID;
CREATE TABLE dreamd_vectors (
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, kind, key)
) WITHOUT ROWID;
CREATE TABLE dreamd_embed_state (
    model TEXT PRIMARY KEY,
    dim INTEGER NOT NULL,
    last_exchange_id INTEGER NOT NULL
);
CREATE TABLE dreamd_failures (
    job TEXT NOT NULL,
    item TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    first_failed_at TEXT NOT NULL,
    last_failed_at TEXT NOT NULL,
    next_attempt_at TEXT NOT NULL,
    quarantined INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, item)
);
CREATE TABLE dreamd_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    outcome TEXT NOT NULL,
    drives_before TEXT,
    drives_after TEXT,
    stats_before TEXT,
    stats_after TEXT,
    jobs TEXT,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE INDEX dreamd_exchanges_session_id ON exchanges(session_id, id);
"""

# Columns dreamd adds to the core tables. Defaults keep the app's INSERTs working.
_CORE_COLUMNS = (
    ("sessions", "user_id", "TEXT NOT NULL DEFAULT 'default'"),
    ("summaries", "user_id", "TEXT NOT NULL DEFAULT 'default'"),
    ("summaries", "dreamd_seq", "INTEGER NOT NULL DEFAULT 0"),
    ("summaries", "dreamd_month", "TEXT"),
    ("summaries", "dreamd_turns", "INTEGER NOT NULL DEFAULT 0"),
    ("summaries", "dreamd_source", "TEXT"),
    ("profile", "user_id", "TEXT NOT NULL DEFAULT 'default'"),
    ("profile", "dreamd_seq", "INTEGER NOT NULL DEFAULT 0"),
    ("profile", "dreamd_source", "TEXT"),
    ("eras", "user_id", "TEXT NOT NULL DEFAULT 'default'"),
    ("eras", "dreamd_seq", "INTEGER NOT NULL DEFAULT 0"),
    ("eras", "dreamd_source", "TEXT"),
    ("narrative", "user_id", "TEXT NOT NULL DEFAULT 'default'"),
    ("narrative", "dreamd_seq", "INTEGER NOT NULL DEFAULT 0"),
    ("narrative", "dreamd_source", "TEXT"),
)

_INDEXES = """
CREATE INDEX dreamd_summaries_seq ON summaries(user_id, dreamd_seq);
CREATE INDEX dreamd_summaries_month ON summaries(user_id, dreamd_month, dreamd_seq);
"""


def _core(conn: Conn) -> None:
    for statement in _statements(CORE_TABLES):
        conn.execute(statement)


def _dreamd_base(conn: Conn) -> None:
    for statement in _statements(_DREAMD_TABLES):
        conn.execute(statement)
    for table, column, decl in _CORE_COLUMNS:
        if column not in _columns(conn, table):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    for statement in _statements(_INDEXES):
        conn.execute(statement)


_LLM_BOOKKEEPING = """
-- The last output per job item with the hash of the prompt that made it: a job whose
-- inputs did not change reuses the output and spends no tokens.
CREATE TABLE dreamd_outputs (
    job TEXT NOT NULL,
    item TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    output TEXT NOT NULL,
    PRIMARY KEY (job, item)
);
ALTER TABLE dreamd_runs ADD COLUMN notes TEXT;
CREATE INDEX dreamd_runs_started ON dreamd_runs(started_at);
"""


def _llm_bookkeeping(conn: Conn) -> None:
    for statement in _statements(_LLM_BOOKKEEPING):
        conn.execute(statement)


def _lexical(conn: Conn) -> None:
    # A full-text index of turns for lexical recall (BM25), kept by dreamd's embed job;
    # rowid = exchanges.id. Porter stemming: "running" finds "run".
    conn.execute(
        "CREATE VIRTUAL TABLE dreamd_fts USING fts5(text, tokenize = 'porter unicode61')"
    )


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[Conn], None]


def _per_user(conn: Conn) -> None:
    """Eras keyed by (user, month); provenance columns on the per-user tiers.

    SQLite cannot change a primary key in place, so eras is rebuilt with every column it
    had (an adopted file keeps its own declarations) and its rows copied; dreamd's keys for
    eras in its own tables gain the user.
    """
    columns = conn.execute("PRAGMA table_info(eras)").fetchall()
    decls = []
    for _, name, kind, notnull, default, _ in columns:
        decl = f'"{name}" {kind}' + (" NOT NULL" if notnull else "")
        decls.append(decl + (f" DEFAULT {default}" if default is not None else ""))
    names = ", ".join(f'"{c[1]}"' for c in columns)
    conn.execute(f"CREATE TABLE dreamd_eras_new ({', '.join(decls)}, dreamd_inputs TEXT, "
                 "PRIMARY KEY (user_id, month))")
    conn.execute(f"INSERT INTO dreamd_eras_new ({names}) SELECT {names} FROM eras")
    conn.execute("DROP TABLE eras")
    conn.execute("ALTER TABLE dreamd_eras_new RENAME TO eras")
    _rekey_eras(conn)
    for table in ("profile", "narrative"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN dreamd_inputs TEXT")
    conn.execute("CREATE INDEX dreamd_summaries_recent ON summaries(dreamd_seq)")


def _rekey_eras(conn: Conn) -> None:
    """dreamd's own references to an era (its vector, stored LLM output, failure record)
    keyed by month alone become `default|month`: before per-user eras every era was the
    default user's, built or not (a month whose era failed has a failure record and no
    era row). A reference whose new key is taken already is older than the one there,
    and goes."""
    for table, key, where in (("dreamd_vectors", "key", "kind = 'era'"),
                              ("dreamd_outputs", "item", "job = 'eras'"),
                              ("dreamd_failures", "item", "job = 'eras'")):
        unkeyed = f"{where} AND instr({key}, '|') = 0"
        conn.execute(f"UPDATE OR IGNORE {table} SET {key} = ? || '|' || {key} "
                     f"WHERE {unkeyed}", (DEFAULT_USER,))
        conn.execute(f"DELETE FROM {table} WHERE {unkeyed}")


def _write_lock(conn: Conn) -> None:
    conn.execute("ALTER TABLE dreamd_runs ADD COLUMN write_lock TEXT")
    # Migration 5 as first shipped re-keyed only the months that had an era row.
    _rekey_eras(conn)


def _keyed_words(conn: Conn) -> None:
    """The words index holds each turn's key with its neighbours (key scheme 2) instead of
    "role: content": the old rows go at once, the embed job rebuilds the index in the
    background, and until then lexical recall sees only what it has rebuilt — never the
    two schemes mixed. (Dropping the table frees its pages without touching each row.)"""
    conn.execute("DROP TABLE dreamd_fts")
    _lexical(conn)
    conn.execute("DELETE FROM dreamd_state WHERE key = 'fts_id'")


_FACTS = """
-- Facts about people, per user: one statement each, with when it held and its sources.
-- A newer fact about the same thing (`about`) replaces an older one: the older keeps its
-- row with valid_to and replaced_by set. Nothing is deleted but by forget.
CREATE TABLE facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    about TEXT,
    statement TEXT NOT NULL,
    valid_from TEXT,
    learned_at TEXT NOT NULL,
    valid_to TEXT,
    replaced_by INTEGER,
    origin TEXT NOT NULL,
    dreamd_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX dreamd_facts_user ON facts(user_id, subject, about);
-- Which turns each fact came from: forget finds a turn's facts by this index.
CREATE TABLE dreamd_fact_sources (
    fact_id INTEGER NOT NULL,
    exchange_id INTEGER NOT NULL,
    PRIMARY KEY (fact_id, exchange_id)
);
CREATE INDEX dreamd_fact_sources_turn ON dreamd_fact_sources(exchange_id);
"""


def _facts(conn: Conn) -> None:
    for statement in _statements(_FACTS):
        conn.execute(statement)


def _facts_per_session(conn: Conn) -> None:
    """How far the facts job has read, per session instead of one mark for the file, so
    that workers that each hold some users read those users' turns for facts."""
    conn.execute("ALTER TABLE dreamd_sessions ADD COLUMN facts_id INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE dreamd_sessions ADD COLUMN facts_turns INTEGER NOT NULL "
                 "DEFAULT 0")
    row = conn.execute("SELECT value FROM dreamd_state WHERE key = 'facts_id'").fetchone()
    read = int(row[0]) if row else 0
    conn.execute("UPDATE dreamd_sessions SET facts_id = CASE WHEN last_id < ? THEN last_id "
                 "ELSE ? END", (read, read))
    conn.execute("UPDATE dreamd_sessions SET facts_turns = CASE WHEN facts_id = last_id "
                 "THEN turns ELSE (SELECT COUNT(*) FROM exchanges x WHERE x.session_id = "
                 "dreamd_sessions.session_id AND x.id <= dreamd_sessions.facts_id) END "
                 "WHERE facts_id > 0")
    conn.execute("CREATE INDEX dreamd_sessions_unread ON dreamd_sessions(user_id, facts_id) "
                 "WHERE last_id > facts_id")


def _queues(conn: Conn) -> None:
    """What changed, queued where it happens, so sensing and the owner check cost what
    changed rather than what the file holds: users whose tiers may be behind their gists
    (dreamd queues them with the gist), and sessions rows the app added or moved (a
    trigger on `sessions` queues them, inside the app's own INSERT or UPDATE)."""
    conn.execute("CREATE TABLE dreamd_tier_queue (user_id TEXT PRIMARY KEY)")
    conn.execute("INSERT INTO dreamd_tier_queue SELECT DISTINCT user_id FROM summaries")
    conn.execute("CREATE TABLE dreamd_owner_queue (session_id TEXT PRIMARY KEY, "
                 "n INTEGER NOT NULL DEFAULT 0)")
    for name, event in (("dreamd_sessions_added", "INSERT"),
                        ("dreamd_sessions_moved", "UPDATE OF user_id")):
        conn.execute(f"CREATE TRIGGER {name} AFTER {event} ON sessions BEGIN "
                     "INSERT OR IGNORE INTO dreamd_owner_queue (session_id) VALUES (NEW.id); "
                     "END")
    conn.execute("INSERT INTO dreamd_owner_queue (session_id) SELECT s.id FROM sessions s "
                 "JOIN dreamd_sessions d ON d.session_id = s.id WHERE d.user_id != s.user_id")


def _seq_sequence(conn: Conn) -> None:
    """On PostgreSQL, derived rows are numbered from a sequence, so that workers writing
    different users do not wait for each other's commit (store/postgres/dialect.py). SQLite's one
    writer keeps numbering them from a row of dreamd_state: nothing changes here."""


def _tokens(conn: Conn) -> None:
    """API tokens an operator hands out, each limited to some users and to reading,
    writing or erasing; stored as a slow hash, never as the token."""
    conn.execute(TOKENS_TABLE)


TOKENS_TABLE = ("CREATE TABLE dreamd_tokens (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "name TEXT NOT NULL, salt TEXT NOT NULL, digest TEXT NOT NULL, users TEXT, "
                "scopes TEXT NOT NULL, created_at TEXT NOT NULL, revoked_at TEXT)")


_WORD = """
-- A person's word on a fact (dreamd.memory.corrections): a version for changes that
-- must not overwrite each other unseen, a pin, and withdrawn facts kept as history.
ALTER TABLE facts ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE facts ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE facts ADD COLUMN withdrawn TEXT;
ALTER TABLE facts ADD COLUMN word_at TEXT;
-- Each correction a row of its own: who, when, what, why; never folded into a rebuild.
CREATE TABLE dreamd_corrections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    fact_id INTEGER NOT NULL,
    action TEXT NOT NULL,
    made_by TEXT NOT NULL,
    why TEXT,
    made_at TEXT NOT NULL,
    old_statement TEXT,
    new_statement TEXT,
    new_fact_id INTEGER,
    reverts INTEGER,
    reverted_by INTEGER,
    dreamd_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX dreamd_corrections_fact ON dreamd_corrections(fact_id);
CREATE INDEX dreamd_corrections_user ON dreamd_corrections(user_id, dreamd_seq);
-- What each pass changed, per user: the dream diary `status` shows.
CREATE TABLE dreamd_diary (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL,
    user_id TEXT NOT NULL,
    job TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    made_at TEXT NOT NULL
);
CREATE INDEX dreamd_diary_run ON dreamd_diary(run_id, user_id);
CREATE INDEX dreamd_diary_user ON dreamd_diary(user_id);
"""


def _word(conn: Conn) -> None:
    for statement in _statements(_WORD):
        conn.execute(statement)


# Sensing sums the turns of the sessions facts have not read from this index alone, so
# its count costs what is unread rather than a lookup of each such session's row.
UNREAD_INDEX = ("CREATE INDEX dreamd_sessions_unread ON dreamd_sessions("
                "user_id, facts_id, last_id, turns, facts_turns) WHERE last_id > facts_id")


def _unread_covered(conn: Conn) -> None:
    conn.execute("DROP INDEX dreamd_sessions_unread")
    conn.execute(UNREAD_INDEX)


# Each user's count of sessions, kept by triggers on the tally as it gains, loses and
# moves sessions: sensing adds a row per user instead of counting every session (a
# user with none has no row: an erased user leaves no name behind). Only
# the fold (one at a time), erasure and a move change it, so workers writing gists and
# facts never wait on these rows.
_COUNT_IN = ("INSERT INTO dreamd_user_sessions (user_id, sessions) VALUES (NEW.user_id, 1) "
             "ON CONFLICT (user_id) DO UPDATE SET sessions = sessions + 1; ")
_COUNT_OUT = ("UPDATE dreamd_user_sessions SET sessions = sessions - 1 "
              "WHERE user_id = OLD.user_id; DELETE FROM dreamd_user_sessions "
              "WHERE user_id = OLD.user_id AND sessions = 0; ")
USER_SESSIONS = (
    "CREATE TABLE dreamd_user_sessions (user_id TEXT PRIMARY KEY, sessions INTEGER NOT NULL)",
    "INSERT INTO dreamd_user_sessions (user_id, sessions) "
    "SELECT user_id, COUNT(*) FROM dreamd_sessions GROUP BY user_id",
    f"CREATE TRIGGER dreamd_user_sessions_added AFTER INSERT ON dreamd_sessions BEGIN "
    f"{_COUNT_IN}END",
    f"CREATE TRIGGER dreamd_user_sessions_gone AFTER DELETE ON dreamd_sessions BEGIN "
    f"{_COUNT_OUT}END",
    f"CREATE TRIGGER dreamd_user_sessions_moved AFTER UPDATE OF user_id ON dreamd_sessions "
    f"WHEN OLD.user_id != NEW.user_id BEGIN {_COUNT_OUT}{_COUNT_IN}END")


def _user_sessions(conn: Conn) -> None:
    for statement in USER_SESSIONS:
        conn.execute(statement)


# Recall reads a user's facts past the last one it holds at every query: with the
# facts by user and id, that is a seek, where the index above walked every fact the user
# has (12 ms at 66,666 facts).
FACTS_BY_ID = "CREATE INDEX IF NOT EXISTS dreamd_facts_user_id ON facts(user_id, id)"


def _facts_by_id(conn: Conn) -> None:
    conn.execute(FACTS_BY_ID)


MIGRATIONS = (
    Migration(1, "core tables (prior-art layout)", _core),
    Migration(2, "dreamd bookkeeping, tally, vectors, runs", _dreamd_base),
    Migration(3, "LLM outputs by input hash, pass notes", _llm_bookkeeping),
    Migration(4, "full-text index of turns", _lexical),
    Migration(5, "per-user eras, provenance of tiers", _per_user),
    Migration(6, "write-lock time per pass; era references keyed by user", _write_lock),
    Migration(7, "words index of turn keys with their neighbours", _keyed_words),
    Migration(8, "facts about people, with their sources", _facts),
    Migration(9, "facts read per session", _facts_per_session),
    Migration(10, "queues of what changed: users' tiers, sessions' owners", _queues),
    Migration(11, "derived rows numbered by a sequence where workers share the store",
              _seq_sequence),
    Migration(12, "API tokens limited to users and scopes", _tokens),
    Migration(13, "a person's word on facts: corrections, versions, pins; the diary", _word),
    Migration(14, "sensing's count of unread turns from its index alone", _unread_covered),
    Migration(15, "each user's count of sessions, kept as the tally changes", _user_sessions),
    Migration(16, "a user's facts by id, for recall's look at new ones", _facts_by_id),
)


def _statements(script: str) -> list[str]:
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _columns(conn: Conn, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}

"""Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`), each of
dreamd's transactions may run on another server connection, carrying that connection's
session settings rather than dreamd's. So the schema and the lock timeout are set inside
every transaction, never only once per connection."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dreamd.config import Config, EmbedConfig, StoreConfig
from dreamd.dream.cycle import run_pass
from dreamd.dream.factory import make_backends
from dreamd.memory.api import Memory
from tests.engines import App


def test_every_transaction_sets_its_schema_and_lock_timeout(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = App(url)
    app.execute("CREATE SCHEMA chat")
    config = Config(db=url, embed=EmbedConfig(backend="hashing"),
                    store=StoreConfig(schema="chat", busy_timeout_ms=1234))
    memory = Memory(url, config=config)

    def handed_over() -> None:
        """The pooler gives dreamd a server connection with the server's defaults."""
        memory.store.raw.execute("RESET ALL")  # type: ignore[attr-defined]

    app.execute("SET search_path TO chat")
    app.session("ana-1", "ana")
    app.turns("ana-1", ["I teach chemistry in Lisbon.", "Since when?",
                        "Since 2019, and I play the saxophone.", "A fine mix."],
              datetime(2024, 3, 1, 10, 0))
    handed_over()
    memory.store.settle_turns(wait=5.0)
    handed_over()
    _, completer = make_backends(memory.config)
    run_pass(memory.store, memory.config, memory.embedder, completer, trigger="test",
             force=True)
    assert app.value("SELECT COUNT(*) FROM chat.summaries") == 1
    assert app.value("SELECT to_regclass('public.exchanges')") is None
    handed_over()
    with memory.store.write() as conn:
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "1234ms"
        assert conn.execute("SHOW search_path").fetchone()[0] == "chat"
    handed_over()
    hits = memory.recall("What does Ana teach?", users=["ana"], k=2)
    assert any("chemistry" in h.content for h in hits)
    handed_over()
    assert memory.export("ana")["sessions"]
    handed_over()
    assert memory.forget("ana", vacuum=True).turns == 4
    assert app.value("SELECT COUNT(*) FROM chat.exchanges") == 0
    memory.close()
    app.close()

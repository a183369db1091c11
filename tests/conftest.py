from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamd.store.connect import SqliteStore

# Tests never read a developer's own config or DREAMD_* settings.
for _name in [n for n in os.environ if n.startswith("DREAMD_")]:
    del os.environ[_name]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def opened(db: Path) -> Iterator[SqliteStore]:
    from tests.helpers import config_for, make_chat_file, open_sqlite

    make_chat_file(db).close()
    store = open_sqlite(config_for(db))
    yield store
    store.close()

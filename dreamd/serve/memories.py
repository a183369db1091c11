"""The server's memories: a few Memory connections on one store, each taken by one
request at a time, with one embedder between them. A user's requests go to the same
connection, so each user's vector matrix is built in one place and stays warm there
(a Memory keeps the 16 it used last); WAL lets the connections read in parallel."""

from __future__ import annotations

import contextlib
import itertools
import threading
import zlib
from collections.abc import Iterator

from dreamd.config import Config
from dreamd.dream.factory import make_embedder, release
from dreamd.errors import DreamdError, StoreBusy
from dreamd.memory.api import Memory

WAIT_SECONDS = 30.0  # for a free connection, before a request is answered 503


class MemoriesBusy(StoreBusy):
    """Every connection stayed taken: the server is overloaded, not broken."""


class Memories:
    def __init__(self, config: Config, *, size: int, create: bool = False) -> None:
        self.config = config
        self.size = size
        self.embedder = make_embedder(config)
        where = config.store_url or config.db_path
        self._all: list[Memory] = []
        try:
            for n in range(size):
                # dreamd's own process: its bundled SQLite (see store/sqlite/driver.py)
                self._all.append(Memory(where, config=config, embedder=self.embedder,
                                        create=create and n == 0, sqlite="bundled"))
        except BaseException:
            self.close()
            raise
        self._locks = [threading.Lock() for _ in self._all]
        self._turns = itertools.count()

    @contextlib.contextmanager
    def memory(self, user: str | None = None) -> Iterator[Memory]:
        """A connection for one request: the user's own, or the next in turn."""
        n = (zlib.crc32(user.encode("utf-8")) if user is not None
             else next(self._turns)) % self.size
        if not self._locks[n].acquire(timeout=WAIT_SECONDS):
            raise MemoriesBusy(f"the store connection stayed busy for {WAIT_SECONDS:g} s; "
                           "try again")
        try:
            yield self._all[n]
        finally:
            self._locks[n].release()

    def close(self) -> None:
        for memory in self._all:
            with contextlib.suppress(DreamdError, OSError):
                memory.close()
        release(self.embedder)

"""The server's memories: a few Memory connections on one store, taken in turn, with one
embedder between them (a Memory serves one call at a time; WAL lets several read)."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator

from dreamd.backends.factory import make_embedder, release
from dreamd.config import Config
from dreamd.errors import DreamdError, StoreBusy
from dreamd.memory.api import Memory

WAIT_SECONDS = 30.0  # for a free connection, before a request is answered 503


class PoolBusy(StoreBusy):
    """Every connection stayed taken: the server is overloaded, not broken."""


class Pool:
    def __init__(self, config: Config, *, size: int, create: bool = False) -> None:
        self.config = config
        self.size = size
        self.embedder = make_embedder(config)
        where = config.store_url or config.db_path
        self._free: queue.Queue[Memory] = queue.Queue()
        self._all: list[Memory] = []
        try:
            for n in range(size):
                # dreamd's own process: its bundled SQLite (see store/sqlite_driver.py)
                memory = Memory(where, config=config, embedder=self.embedder,
                                create=create and n == 0, sqlite="bundled")
                self._all.append(memory)
                self._free.put(memory)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def memory(self) -> Iterator[Memory]:
        try:
            memory = self._free.get(timeout=WAIT_SECONDS)
        except queue.Empty:
            raise PoolBusy(f"all {self.size} store connections stayed busy for "
                           f"{WAIT_SECONDS:g} s; try again") from None
        try:
            yield memory
        finally:
            self._free.put(memory)

    def close(self) -> None:
        for memory in self._all:
            with contextlib.suppress(DreamdError, OSError):
                memory.close()
        release(self.embedder)

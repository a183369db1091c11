"""Who a bearer token is: the operator's own token (every user, every scope), or one
`dreamd tokens add` issued, checked against its slow hash once and then remembered for a
little while (a revoked token stops working within REMEMBER seconds)."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from dreamd.memory.tokens import OPERATOR, Grant

REMEMBER = 10.0  # seconds a token's check holds before the store is asked again
KEPT = 1024  # tokens remembered at most (the oldest go first)


class Keyring:
    def __init__(self, operator: str | None, check: Callable[[str], Grant | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.operator, self.check, self.clock = operator, check, clock
        self._seen: OrderedDict[bytes, tuple[Grant | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether a request must show a token: once the operator has one."""
        return self.operator is not None

    def grant(self, token: str) -> Grant | None:
        """What `token` may do, or None: no such live token. May ask the store (call it
        off the event loop)."""
        if self.operator is not None and hmac.compare_digest(token.encode(),
                                                             self.operator.encode()):
            return OPERATOR
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None and self.clock() - seen[1] < REMEMBER:
            return seen[0]
        found = self.check(token)
        with self._lock:
            self._seen[key] = (found, self.clock())
            self._seen.move_to_end(key)
            while len(self._seen) > KEPT:
                self._seen.popitem(last=False)
        return found

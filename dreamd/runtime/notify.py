"""sd_notify over an AF_UNIX datagram socket: READY, STATUS, WATCHDOG, STOPPING.

About twenty lines of the documented protocol (sd_notify(3)) instead of a dependency:
the sdnotify package does the same and no more, and has no watchdog helpers to reuse.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends to $NOTIFY_SOCKET when systemd set it; does nothing otherwise."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # an abstract socket
        self.address = address or None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        ours = not pid or pid == str(os.getpid())
        self.watchdog_seconds = int(usec) / 1e6 if usec.isdigit() and ours else None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> None:
        if self.address is None:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(self.address)
                sock.sendall("\n".join(lines).encode())
            except OSError:
                pass  # systemd went away; notifying is best effort

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")

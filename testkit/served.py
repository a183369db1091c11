"""`dreamd serve` in a real subprocess on a free port, for tests and benchmarks: the port
is read from the server's own first line, so nothing races for it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).parent.parent
STARTED = re.compile(r"dreamd serve: (http://\S+?)/ ")


def env_for(**extra: str) -> dict[str, str]:
    """The environment a test's dreamd runs in: no developer settings, the hashing
    embedder, JSON logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env.update({"DREAMD_EMBED__BACKEND": "hashing", "DREAMD_LOG__FORMAT": "json",
                "PYTHONPATH": str(ROOT)}, **extra)
    return env


class Served:
    def __init__(self, target: str, *args: str, token: str | None = None,
                 env: dict[str, str] | None = None, deadline: float = 120.0) -> None:
        self.token, self.target = token, target
        env = dict(env or env_for())
        if token is not None:
            env["DREAMD_API_TOKEN"] = token
        self.log = Path(tempfile.mkstemp(prefix="dreamd-serve-", suffix=".log")[1])
        with self.log.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dreamd", "--db", target, "serve", "--port", "0",
                 *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        give_up = time.monotonic() + deadline
        while (found := STARTED.search(self.log.read_text())) is None:
            if self.process.poll() is not None or time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"dreamd serve did not start: {self.log.read_text()}")
            time.sleep(0.05)
        self.url = found.group(1)

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        token = self.token if token is None else token  # "": none
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120, **kwargs)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text()

"""Secrets: read from the environment or a systemd credential, never from the config."""

from __future__ import annotations

import os
from pathlib import Path


def secret(variable: str, credential: str, file: str = "",
           environ: dict[str, str] | None = None) -> str | None:
    """A secret from the environment variable, else `file`, else the systemd credential
    ($CREDENTIALS_DIRECTORY/<credential>): never from the config file itself."""
    env = os.environ if environ is None else environ
    if env.get(variable):
        return env[variable]
    directory = env.get("CREDENTIALS_DIRECTORY")
    for path in (Path(file).expanduser() if file else None,
                 Path(directory) / credential if directory else None):
        if path is not None and path.is_file():
            return path.read_text(encoding="utf-8").strip() or None
    return None

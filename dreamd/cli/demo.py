"""The demo: write the shipped sample conversations into a memory file, as a chat app would."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

from dreamd.errors import DreamdError
from dreamd.store.interface import Conn
from dreamd.store.sqlite import app_file

ROLES = {"U": "user", "A": "assistant"}


@dataclass(frozen=True)
class SampleSession:
    session_id: str
    name: str
    turns: tuple[tuple[str, str, str], ...]  # (role, content, created_at)


def parse_samples(text: str) -> list[SampleSession]:
    """Parse the sample format: '## id | ISO time | title', then 'U:'/'A:' lines."""
    sessions: list[SampleSession] = []
    header: tuple[str, datetime, str] | None = None
    turns: list[tuple[str, str, str]] = []

    def flush() -> None:
        if header:
            sessions.append(SampleSession(header[0], header[2], tuple(turns)))

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("# "):
            continue
        if line.startswith("## "):
            flush()
            parts = [p.strip() for p in line[3:].split("|")]
            if len(parts) != 3:
                raise DreamdError(f"sample line {number}: expected '## id | time | title'")
            header, turns = (parts[0], datetime.fromisoformat(parts[1]), parts[2]), []
            continue
        role, sep, content = line.partition(":")
        if header is None or not sep or role not in ROLES:
            raise DreamdError(f"sample line {number}: expected 'U: text' or 'A: text'")
        at = header[1] + timedelta(minutes=len(turns))
        turns.append((ROLES[role], content.strip(), at.isoformat()))
    flush()
    return sessions


def sample_sessions() -> list[SampleSession]:
    text = (resources.files("dreamd") / "data" / "sample_conversations.txt").read_text("utf-8")
    return parse_samples(text)


def write_sessions(conn: Conn, sessions: list[SampleSession]) -> int:
    """Insert sessions and turns like a chat app: plain text, no embeddings."""
    return app_file.write_sessions(conn, [
        (s.session_id, s.name, list(s.turns)) for s in sessions])


DEMO_MARK = "dreamd_demo"  # a table only `dreamd demo` creates: the file is the demo's


def build_demo(path: Path, replace: bool = False, default: bool = False) -> int:
    """Write the sample conversations into a new file at `path`. An existing file is
    replaced only with `replace`, only if the demo made it (its mark is in it), and only
    while no dreamd works on it; the default memory location is never used."""
    from dreamd.runtime.lock import InstanceLock

    if default:
        raise DreamdError("the demo needs its own file: give --db PATH (it never writes to "
                          "the default memory file)")
    if path.exists():
        if not replace:
            raise DreamdError(f"{path} exists; pass --replace to overwrite it")
        if not app_file.has_mark(path, DEMO_MARK):
            raise DreamdError(f"{path} was not made by `dreamd demo`; the demo replaces only "
                              "files it made itself")
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
    lock = InstanceLock(path)
    if path.exists():
        lock.acquire()  # refused while a dreamd works on the file
    try:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        with app_file.created(path, mark=DEMO_MARK) as conn:
            return write_sessions(conn, sample_sessions())
    finally:
        lock.release()

"""Importing real history: assistants' exports (ChatGPT, Claude, Open WebUI: see
memory/assistants.py), a documented JSONL format, LoCoMo, LongMemEval.

Parsers are pure (parsed JSON in, sessions out) and name the file and the place of any
problem; the writer adds the turns as a chat app would, keeping their real dates, in one
transaction per file, so a bad file imports nothing and a re-import adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dreamd.errors import ImportFormatError, StoreError
from dreamd.ids import DEFAULT_USER
from dreamd.memory.assistants import parse_chatgpt, parse_claude, parse_openwebui
from dreamd.memory.history import ImportSession, ImportTurn, iso, spaced
from dreamd.store.interface import Store
from dreamd.store.turns import add_session, add_turns, app_embeds_turns, turn_keys


@dataclass(frozen=True)
class ImportResult:
    sessions: int
    new_sessions: int
    turns_added: int
    turns_present: int
    # Sessions left out, each with why: "'Kyoto': …".
    left_out: tuple[str, ...] = ()


# ------------------------------------------------------------------------- JSONL

JSONL_FIELDS = ("session", "role", "content", "created_at")


def parse_jsonl(lines: Iterable[str], where: str) -> list[ImportSession]:
    """One turn per line: {"session", "role", "content", "created_at" (ISO-8601), "name"?}."""
    sessions: dict[str, list[ImportTurn]] = {}
    names: dict[str, str | None] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        place = f"{where}: line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ImportFormatError(f"{place}: not JSON ({exc.args[0]})") from None
        if not isinstance(row, dict):
            raise ImportFormatError(f"{place}: expected an object")
        for key in JSONL_FIELDS:
            if not isinstance(row.get(key), str) or not row[key]:
                raise ImportFormatError(f"{place}: missing or empty string field {key!r}")
        if row.get("name") is not None and not isinstance(row["name"], str):
            raise ImportFormatError(f"{place}: name must be a string")
        try:
            created = iso(datetime.fromisoformat(row["created_at"]))
        except ValueError:
            raise ImportFormatError(
                f"{place}: created_at is not ISO-8601: {row['created_at']!r}") from None
        except OverflowError:
            raise ImportFormatError(
                f"{place}: created_at is out of range: {row['created_at']!r}") from None
        sessions.setdefault(row["session"], []).append(
            ImportTurn(row["role"], row["content"], created))
        names.setdefault(row["session"], row.get("name"))
    return [ImportSession(sid, names[sid], tuple(turns)) for sid, turns in sessions.items()]


# ------------------------------------------------------------------------- benchmarks


def parse_locomo(data: Any, where: str) -> list[ImportSession]:
    """LoCoMo: speakers keep their names as roles; image turns keep their caption."""
    if not isinstance(data, list):
        raise ImportFormatError(f"{where}: expected a list of conversations")
    sessions = []
    for conv in data:
        sample = conv.get("sample_id", "?") if isinstance(conv, dict) else "?"
        body = conv.get("conversation") if isinstance(conv, dict) else None
        if not isinstance(body, dict):
            raise ImportFormatError(f"{where}: {sample}: no 'conversation'")
        numbers = sorted(int(k.split("_")[1]) for k in body
                         if k.startswith("session_") and k.split("_")[1].isdigit()
                         and k.count("_") == 1)
        for n in numbers:
            place = f"{where}: {sample} session_{n}"
            raw_date = body.get(f"session_{n}_date_time")
            try:
                start = datetime.strptime(str(raw_date), "%I:%M %p on %d %B, %Y")
            except ValueError:
                raise ImportFormatError(f"{place}: unreadable date {raw_date!r}") from None
            texts = []
            for turn in body[f"session_{n}"]:
                if not isinstance(turn, dict) or "speaker" not in turn or "text" not in turn:
                    raise ImportFormatError(f"{place}: a turn without speaker or text")
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares an image: {turn['blip_caption']}]"
                texts.append((turn["speaker"], text))
            sessions.append(ImportSession(f"locomo:{sample}:{n}", None, spaced(start, texts)))
    return sessions


def parse_longmemeval(data: Any, where: str) -> list[ImportSession]:
    """LongMemEval: every haystack session once (they repeat across questions)."""
    if not isinstance(data, list):
        raise ImportFormatError(f"{where}: expected a list of questions")
    sessions: dict[str, ImportSession] = {}
    for question in data:
        qid = question.get("question_id", "?") if isinstance(question, dict) else "?"
        try:
            triples = zip(question["haystack_session_ids"], question["haystack_dates"],
                          question["haystack_sessions"], strict=True)
            for sid, raw_date, turns in triples:
                if sid in sessions:
                    continue
                try:
                    start = datetime.strptime(raw_date, "%Y/%m/%d (%a) %H:%M")
                except ValueError:
                    raise ImportFormatError(
                        f"{where}: {qid} session {sid}: unreadable date {raw_date!r}") from None
                texts = [(t["role"], t["content"]) for t in turns]
                sessions[sid] = ImportSession(f"lme:{sid}", None, spaced(start, texts))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ImportFormatError):
                raise
            raise ImportFormatError(f"{where}: {qid}: malformed haystack ({exc})") from None
    return list(sessions.values())


# ------------------------------------------------------------------------- reading, writing

FORMATS = ("chatgpt", "claude", "openwebui", "jsonl", "locomo", "longmemeval")


def read_sessions(fmt: str, path: Path) -> list[ImportSession]:
    """Parse `path` as `fmt`; every problem names the file and the place."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportFormatError(f"{where}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ImportFormatError(f"{where}: not UTF-8 text") from None
    if fmt == "jsonl":
        return parse(fmt, text.splitlines(), where)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ImportFormatError(f"{where}: not JSON ({exc})") from None
    return parse(fmt, data, where)


def one_line(text: str) -> str:
    """`text` with its line breaks and other control characters written as escapes."""
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)


PARSERS: dict[str, Callable[[Any, str], list[ImportSession]]] = {
    "chatgpt": parse_chatgpt, "claude": parse_claude, "openwebui": parse_openwebui,
    "jsonl": parse_jsonl, "locomo": parse_locomo, "longmemeval": parse_longmemeval,
}


def parse(fmt: str, data: Any, where: str) -> list[ImportSession]:
    """Parse with the format's parser. The parsers name the places they expect to go
    wrong; any other shape a file may take still ends as one ImportFormatError, and every
    text must be storable (valid Unicode: JSON can spell a lone surrogate)."""
    try:
        sessions = PARSERS[fmt](data, where)
    except ImportFormatError as exc:
        # The file's own ids and values appear in the message: one line, whatever they hold.
        raise ImportFormatError(one_line(str(exc))) from None
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError,
            RecursionError) as exc:
        raise ImportFormatError(one_line(f"{where}: not a {fmt} file as expected "
                                         f"({type(exc).__name__}: {str(exc)[:120]})")) from None
    for session in sessions:
        texts = [session.session_id, session.name or ""]
        for turn in session.turns:
            texts += [turn.role, turn.content]
        for text in texts:
            if not isinstance(text, str):
                raise ImportFormatError(f"{where}: session {session.session_id!r}: "
                                        f"expected text, got {type(text).__name__}")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ImportFormatError(
                    f"{where}: session {session.session_id!r}: text that is not valid "
                    "Unicode (a lone surrogate)") from None
    return sessions


def write_sessions(store: Store, sessions: list[ImportSession],
                   progress: Callable[[int, int], None] = lambda done, total: None,
                   user: str = DEFAULT_USER) -> ImportResult:
    """Add the turns not already present, in one transaction (all or nothing); new
    sessions are filed under `user` (an existing session keeps its owner)."""
    refuse_app_embedded(store)
    added = present = new = 0
    left_out = [f"{s.name or s.session_id!r}: {s.skip}" for s in sessions if s.skip]
    with store.write(alone=True) as conn:
        for index, session in enumerate(sessions):
            if session.skip:
                continue
            existing = turn_keys(conn, session.session_id)
            if existing - {(t.role, t.content, t.created_at) for t in session.turns}:
                # Imported before from another branch (the user edited a message since):
                # adding this one would interleave two versions of the conversation.
                left_out.append(f"{session.name or session.session_id!r}: changed since it "
                                f"was imported; forget session {session.session_id} and "
                                "import again to replace it")
                continue
            new += int(not existing)
            first = session.turns[0].created_at if session.turns else iso(datetime.now(UTC))
            add_session(conn, session.session_id, session.name, first, user)
            rows = [(session.session_id, t.role, t.content, t.created_at) for t in session.turns
                    if (t.role, t.content, t.created_at) not in existing]
            add_turns(conn, rows)
            added += len(rows)
            present += len(session.turns) - len(rows)
            if index % 200 == 0:
                progress(index + 1, len(sessions))
    progress(len(sessions), len(sessions))
    return ImportResult(len(sessions) - len(left_out), new, added, present, tuple(left_out))


def refuse_app_embedded(store: Store) -> None:
    """In the prior-art layout every turn carries the chat app's own embedding (NOT NULL)
    and the app's recall stacks them all: a turn without one, or with a vector of another
    model, would break it, and dreamd cannot make the app's vectors."""
    with store.read() as conn:
        app_embeds = app_embeds_turns(conn)
    if app_embeds:
        raise StoreError(
            f"{store.where}: exchanges.embedding is NOT NULL here (the chat app stores its "
            "own embedding with every turn), so dreamd cannot add turns to it; import into "
            "a new memory file, or let the chat app import the history so it embeds each turn")

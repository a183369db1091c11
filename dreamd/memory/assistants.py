"""Parsers of the data exports chat assistants give their users: ChatGPT's, Claude's and
Open WebUI's. Each reads the branch of a conversation the user last saw, keeps the real
dates, skips what the user never saw as a turn (system and tool messages), leaves a
placeholder for an attachment, and names the place of any problem."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dreamd.errors import ImportFormatError
from dreamd.memory.history import ImportSession, ImportTurn, as_object, iso


def named(where: str, kind: str, title: Any, index: int) -> str:
    """Where a problem is: the file and the conversation, by its title if it has one,
    else by its place in the file."""
    return (f"{where}: {kind} {title!r}" if isinstance(title, str) and title
            else f"{where}: {kind} {index + 1}")


# ------------------------------------------------------------------------- ChatGPT



def _chatgpt_text(message: dict[str, Any]) -> str:
    """The message's text; an image (or other attachment) part leaves a placeholder, so
    "what do you think of this?" keeps its object."""
    content = as_object(message.get("content"))
    if content.get("content_type") not in ("text", "multimodal_text"):
        return ""
    raw = content.get("parts")
    parts: list[Any] = raw if isinstance(raw, list) else []
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            kind = str(part.get("content_type") or "")
            texts.append("[image]" if "image" in kind else f"[{kind or 'attachment'}]")
    return "\n".join(t for t in texts if t.strip()).strip()


def _chatgpt_time(stamp: Any, place: str) -> str:
    """A ChatGPT create_time (seconds since the epoch) as ISO UTC."""
    if isinstance(stamp, bool) or not isinstance(stamp, int | float | str):
        raise ImportFormatError(f"{place}: unreadable time {stamp!r}")
    try:
        return iso(datetime.fromtimestamp(float(stamp), UTC))
    except ValueError:
        raise ImportFormatError(f"{place}: unreadable time {stamp!r}") from None
    except (OverflowError, OSError):
        raise ImportFormatError(f"{place}: time out of range {stamp!r}") from None


def _chatgpt_branch(mapping: dict[str, Any], node: Any, place: str) -> list[dict[str, Any]]:
    """The entries from `node` (the current one) up to the tree's root, newest first."""
    chain: list[dict[str, Any]] = []
    seen = set()
    while node is not None:
        if (not isinstance(node, str) or not isinstance(mapping.get(node), dict)
                or node in seen):
            raise ImportFormatError(f"{place}: broken message tree at node {node!r}")
        seen.add(node)
        chain.append(mapping[node])
        node = chain[-1].get("parent")
    return chain


def parse_chatgpt(data: Any, where: str) -> list[ImportSession]:
    """conversations.json: follow each conversation from current_node up to its root.

    That path is the branch the user last saw: edited messages leave their older
    branches behind. System, tool and hidden messages are skipped; a message without a
    time takes the previous message's, or the conversation's.
    """
    if not isinstance(data, list):
        raise ImportFormatError(f"{where}: expected a list of conversations")
    sessions = []
    for index, conv in enumerate(data):
        title = as_object(conv).get("title")
        place = named(where, "conversation", title, index)
        if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
            raise ImportFormatError(f"{place}: no 'mapping' of messages")
        chain = _chatgpt_branch(conv["mapping"], conv.get("current_node"), place)
        fallback = conv.get("create_time") or conv.get("update_time")
        found: list[tuple[str, str, Any]] = []  # role, text, stamp or None
        for entry in reversed(chain):
            message = entry.get("message")
            if message is None:
                continue  # the tree's root carries none
            if not isinstance(message, dict):
                raise ImportFormatError(f"{place}: a message that is not an object: "
                                        f"{str(message)[:40]!r}")
            role = as_object(message.get("author")).get("role")
            hidden = as_object(message.get("metadata")).get("is_visually_hidden_from_conversation")
            recipient = message.get("recipient", "all")
            text = _chatgpt_text(message)
            stamp = message.get("create_time") or fallback
            if stamp is not None:
                fallback = stamp
            # An assistant message to a tool (recipient "memory", "python", …) is a call
            # the user never saw, not a turn of the conversation.
            if role not in ("user", "assistant") or hidden or not text or recipient != "all":
                continue
            found.append((role, text, stamp))
        cid = conv.get("id") or conv.get("conversation_id") or f"index-{index}"
        name = title if isinstance(title, str) else None
        stamps = [stamp for _, _, stamp in found if stamp is not None]
        if found and not stamps:
            sessions.append(ImportSession(f"chatgpt:{cid}", name, (),
                                          skip="no message and no conversation time"))
            continue
        turns = []
        for role, text, stamp in found:
            # A first message without a time takes the first time after it.
            stamp = stamp if stamp is not None else stamps[0]
            turns.append(ImportTurn(role, text, _chatgpt_time(stamp, place)))
        if turns:
            sessions.append(ImportSession(f"chatgpt:{cid}", name, tuple(turns)))
    return sessions


# ------------------------------------------------------------------------- Claude


def _claude_text(message: dict[str, Any]) -> str:
    """A message's words: its `content` blocks of type text (tool use, tool results and
    thinking are not what was said), else its `text`; each attachment or file leaves a
    placeholder with its name."""
    blocks = message.get("content")
    texts = [str(b.get("text") or "") for b in blocks if isinstance(b, dict)
             and b.get("type") == "text"] if isinstance(blocks, list) else []
    if not any(t.strip() for t in texts) and isinstance(message.get("text"), str):
        texts = [message["text"]]
    for key in ("attachments", "files"):
        for item in message.get(key) or []:
            name = as_object(item).get("file_name")
            texts.append(f"[attached: {name}]" if isinstance(name, str) and name
                         else "[attachment]")
    return "\n".join(t for t in texts if t.strip()).strip()


def _iso_text(stamp: Any, place: str) -> str:
    """An ISO 8601 time (Claude's `created_at`) as ISO UTC."""
    if not isinstance(stamp, str):
        raise ImportFormatError(f"{place}: unreadable time {stamp!r}")
    try:
        return iso(datetime.fromisoformat(stamp))
    except ValueError:
        raise ImportFormatError(f"{place}: unreadable time {stamp!r}") from None
    except OverflowError:
        raise ImportFormatError(f"{place}: time out of range {stamp!r}") from None


def _claude_branch(conv: dict[str, Any], messages: list[Any]) -> list[Any]:
    """The messages of the branch last shown: where messages name their parent, the
    chain from the conversation's current leaf (else its last message) up to the root;
    else the list as it is, which is then one branch."""
    if not any(isinstance(m, dict) and "parent_message_uuid" in m for m in messages):
        return messages
    by_id = {m.get("uuid"): m for m in messages if isinstance(m, dict)}
    node = conv.get("current_leaf_message_uuid") or as_object(messages[-1]).get("uuid")
    chain: list[Any] = []
    while node in by_id and by_id[node] not in chain:
        chain.append(by_id[node])
        node = by_id[node].get("parent_message_uuid")
    return list(reversed(chain))


CLAUDE_ROLES = {"human": "user", "assistant": "assistant"}


def parse_claude(data: Any, where: str) -> list[ImportSession]:
    """Claude's conversations.json: a list of conversations (`uuid`, `name`,
    `created_at`), each with its `chat_messages` in order: `sender` ("human" or
    "assistant"), `created_at` (ISO 8601), the words in `text` or in `content` blocks."""
    if not isinstance(data, list):
        raise ImportFormatError(f"{where}: expected a list of conversations")
    sessions = []
    for index, conv in enumerate(data):
        name = as_object(conv).get("name")
        place = named(where, "conversation", name, index)
        if not isinstance(conv, dict) or not isinstance(conv.get("chat_messages"), list):
            raise ImportFormatError(f"{place}: no 'chat_messages'")
        turns = []
        for number, message in enumerate(_claude_branch(conv, conv["chat_messages"]), 1):
            if not isinstance(message, dict):
                raise ImportFormatError(f"{place}: message {number} is not an object")
            role, text = CLAUDE_ROLES.get(str(message.get("sender"))), _claude_text(message)
            if role is None or not text:
                continue
            stamp = message.get("created_at") or conv.get("created_at")
            turns.append(ImportTurn(role, text, _iso_text(stamp, f"{place}: message {number}")))
        if turns:
            cid = conv.get("uuid") or f"index-{index}"
            sessions.append(ImportSession(f"claude:{cid}", name if isinstance(name, str)
                                          and name else None, tuple(turns)))
    return sessions


# ------------------------------------------------------------------------- Open WebUI


def _openwebui_text(message: dict[str, Any]) -> str:
    """A message's words (`content` as text, or a list of parts of type text), and a
    placeholder for each file it carried."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text") or "") for p in content
                            if isinstance(p, dict) and p.get("type") == "text")
    texts = [content] if isinstance(content, str) else []
    for item in message.get("files") or []:
        item = as_object(item)
        name = item.get("name") or as_object(item.get("file")).get("filename")
        texts.append("[image]" if item.get("type") == "image" else
                     f"[attached: {name}]" if isinstance(name, str) and name else "[attachment]")
    return "\n".join(t for t in texts if t.strip()).strip()


def _seconds(stamp: Any, place: str) -> str:
    """Open WebUI's times: seconds since the epoch (an older chat's may be milliseconds)."""
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise ImportFormatError(f"{place}: unreadable time {stamp!r}")
    seconds = stamp / 1000 if stamp > 100_000_000_000 else stamp  # past the year 5138
    try:
        return iso(datetime.fromtimestamp(seconds, UTC))
    except (OverflowError, OSError, ValueError):
        raise ImportFormatError(f"{place}: time out of range {stamp!r}") from None


def _openwebui_branch(chat: dict[str, Any], place: str) -> list[Any]:
    """The branch last shown: from the history's `currentId` up through each message's
    `parentId`; a chat without a history keeps its `messages` list."""
    history = as_object(chat.get("history"))
    messages = history.get("messages")
    if not isinstance(messages, dict) or not messages:
        listed = chat.get("messages")
        return listed if isinstance(listed, list) else []
    node, chain = history.get("currentId"), []
    while node is not None:
        if not isinstance(messages.get(node), dict) or messages[node] in chain:
            raise ImportFormatError(f"{place}: broken message tree at {node!r}")
        chain.append(messages[node])
        node = messages[node].get("parentId")
    return list(reversed(chain))


def parse_openwebui(data: Any, where: str) -> list[ImportSession]:
    """Open WebUI's "Export All Chats": a list of chats (`id`, `title`, `created_at` in
    seconds, and the conversation under `chat`; an older export is the `chat` objects
    themselves), each message with `role`, `content` and `timestamp`."""
    if not isinstance(data, list):
        raise ImportFormatError(f"{where}: expected a list of chats")
    sessions = []
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ImportFormatError(f"{where}: chat {index + 1} is not an object")
        chat = as_object(entry.get("chat")) if "chat" in entry else entry
        title = entry.get("title") or chat.get("title")
        place = named(where, "chat", title, index)
        fallback = entry.get("created_at") or chat.get("timestamp")
        turns = []
        for number, message in enumerate(_openwebui_branch(chat, place), 1):
            if not isinstance(message, dict):
                raise ImportFormatError(f"{place}: message {number} is not an object")
            role, text = message.get("role"), _openwebui_text(message)
            if role not in ("user", "assistant") or not text:
                continue
            stamp = message.get("timestamp") or fallback
            turns.append(ImportTurn(role, text, _seconds(stamp, f"{place}: message {number}")))
        if turns:
            cid = entry.get("id") or chat.get("id") or f"index-{index}"
            sessions.append(ImportSession(f"openwebui:{cid}", title if isinstance(title, str)
                                          and title else None, tuple(turns)))
    return sessions

"""A session's gist as a friend's notes, without a model: what each turn *said*.

Each turn is read sentence by sentence as the facts are (dreamd.text.facts): greetings,
thanks, reactions, questions, orders and stage directions tell nothing and are left out;
what is left is told in the third person, or quoted where that would be a guess. An
image a speaker shared stays as what was shown ("Rui shared a photo of a grey cat"),
without its markup. One line per turn, ordered as said; which turns make the gist is
chosen by how much their sentences tell (the facts selector's first look, learned from the
project's own examples, where it has one) and by how little they repeat each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dreamd.text.facts import extracted
from dreamd.text.speech import INTERJECTIONS, sentences

MAX_LINE = 320  # a gist line is a turn's news, not its every word
_QUOTE_OPEN = re.compile(r'^[^:"]{1,40}: "')
_STAGE = re.compile(r"\[([^\]:]*):\s*([^\]]*)\]")
_SHOWN = re.compile(r"^(?:an? |the )?(?:photo|picture|image|drawing|painting|screenshot|"
                    r"selfie|sketch)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Told:
    """One turn as a gist line: its news in the third person, each statement apart."""

    turn: int  # its place among the prompt's new turns
    statements: tuple[str, ...]
    image: str | None  # what it showed, as a sentence

    @property
    def line(self) -> str:
        return line_of(self.statements, self.image)


def shown(speaker: str, content: str) -> str | None:
    """What a turn's stage direction showed, as a sentence ("Rui shared a photo of a grey
    cat."); None when it shows nothing."""
    for m in _STAGE.finditer(content):
        kind, caption = m.group(1).strip().lower(), m.group(2).strip().rstrip(".")
        if not caption or ("image" not in kind and "photo" not in kind):
            continue
        if _SHOWN.match(caption):
            return f"{speaker} shared {caption[:1].lower()}{caption[1:]}."
        return f"{speaker} shared an image of {caption[:1].lower()}{caption[1:]}."
    return None


def told(speaker: str, content: str, said_at: str, addressee: str | None,
         previous: str = "", replying: bool = True) -> tuple[str, ...]:
    """A turn's statements about someone, told as the facts job tells them; not a greeting
    the facts job leaves to its selector (`"Hi Auntie Margaret!"`)."""
    return tuple(c.statement for c in extracted(speaker, content, said_at, addressee,
                                                previous, replying)
                 if not greets(c.statement))


def greets(statement: str) -> bool:
    """Whether a statement opens, past its speaker's quotation mark, with a greeting or an
    interjection."""
    quote = _QUOTE_OPEN.match(statement)
    first = re.match(r"[A-Za-z]+", statement[quote.end():] if quote else statement)
    return first is not None and first.group().lower() in INTERJECTIONS


def line_of(statements: tuple[str, ...], image: str | None, most: int = MAX_LINE) -> str:
    """The statements as one line, in the order said, as many as fit in `most`; what was
    shown after them."""
    parts: list[str] = []
    for statement in statements:
        end = "" if statement.endswith((".", "!", "?", '"')) else "."
        if sum(len(p) + 1 for p in parts) + len(statement) + len(end) > most and parts:
            break
        said = _QUOTE_OPEN.match(statement)
        if said and parts and parts[-1].startswith(said.group()) and parts[-1].endswith('"'):
            # One speaker quoted twice in a row: one quotation (`Bea: "A. B."`).
            parts[-1] = parts[-1][:-1] + " " + statement[said.end():]
            continue
        parts.append(statement + end)
    if image and sum(len(p) + 1 for p in parts) + len(image) <= most:
        parts.append(image)
    line = " ".join(parts)
    return line[:1].upper() + line[1:]  # "the user moved ..." opens a line as a sentence


def speaker_name(role: str, people: tuple[str, ...]) -> str:
    """Who said a turn: its role, or the person's name where the role is "user" or
    "assistant" and the names are known."""
    low = role.strip().lower()
    if low == "user" and people[:1] and people[0]:
        return people[0]
    if low == "assistant" and people[1:2] and people[1]:
        return people[1]
    return role.strip()


def told_turns(lines: list[str], said_at: list[str], people: tuple[str, ...]) -> list[Told]:
    """Each "role: words" turn with something to tell, as a gist line."""
    speakers = [speaker_name(line.partition(": ")[0], people) for line in lines]
    out = []
    for i, line in enumerate(lines):
        content = line.partition(": ")[2]
        others = [s for s in speakers[:i][::-1] + speakers[i + 1:] if s != speakers[i]]
        previous = lines[i - 1].partition(": ")[2] if i else ""
        statements = told(speakers[i], content, said_at[i] if i < len(said_at) else "",
                          others[0] if others else None, previous,
                          replying=bool(i) and speakers[i - 1] != speakers[i])
        image = shown(speakers[i], content)
        if statements or image:
            out.append(Told(i, statements, image))
    return out


def has_words(line: str) -> bool:
    return any(len(s.split()) >= 3 for s in sentences(line))


_MARKUP = re.compile(r"\s*\[[^\]]*\]")
_LINE_HEAD = re.compile(r"^\s*(?:[-*•]\s*)?(?:[^:\"]{1,40}:\s+)?[\"“']?")


def readable(gist: str) -> str:
    """A gist as a reader gets it, whoever wrote it: stage directions (`[shares an image:
    ...]`) cut from every line, and a line that opens with a greeting, thanks or an
    interjection (past its bullet, speaker and quotation mark) left out; "" when nothing
    is left."""
    kept = []
    for line in gist.splitlines():
        line = _MARKUP.sub("", line).rstrip()
        head = _LINE_HEAD.match(line)
        words = re.findall(r"[A-Za-z']+", line[head.end() if head else 0:])[:2]
        if words and words[0].lower() in INTERJECTIONS \
                and not (words[0].lower() == "thanks" and words[1:] == ["to"]):
            continue  # "Hey Sam!", "Wow, lovely"; not "Thanks to the new job, ..."
        if line.strip(" -*•"):
            kept.append(line)
    return "\n".join(kept)

"""Whether a model's answer is memory a person would keep: pure checks, no SDK.

A small local model answers with junk that looks like text: a chat template's markers
(`<<SYS>>`), the instructions echoed back, one line looping, or the material copied out
wholesale. None of it may be stored. `junk(answer, prompt)` names the first problem, or
returns None for an answer worth keeping.

Applied to LLM answers only: the extractive backend keeps lines verbatim by design.
Reflections are JSON with their own schema; only the marker and loop checks apply.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from dreamd.models import JSON_TASKS, Prompt
from dreamd.text.dates import implied

# Chat-template and prompt markers no answer should contain: Llama 2, ChatML, Gemma,
# Mistral/Llama 3 headers, and any tag-like markup (a data block's tag copied with its
# digest garbled, HTML, a made-up template tag). A copied data tag is stripped before
# validation (llm_output.clean); any other markup is junk.
MARKERS = re.compile(
    r"<<\s*/?\s*SYS\s*>>|\[/?INST\]|<\|[^|<>\n]{1,40}\|>|<start_of_turn>|<end_of_turn>|"
    r"</?[A-Za-z][\w.:-]{0,40}(?:\s[^<>\n]{0,200})?/?>",
    re.IGNORECASE)

ECHO_SHARE = 0.5  # of the answer's words in runs of 8 that also stand in the instructions
COPY_SHARE = 0.6  # of the answer's lines that stand verbatim in the material
LOOP_LINES = 3  # the same line this many times is a loop
LOOP_SHARE = 0.5  # or: its distinct word-8-grams under this share of all of them


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _grams(words: list[str], n: int = 8) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def echoed(answer: str, instructions: str) -> bool:
    """Most of the answer is the instructions given back (8-word runs in common)."""
    grams = _grams(_words(answer))
    if not grams:
        return False
    theirs = set(_grams(_words(instructions)))
    return sum(g in theirs for g in grams) / len(grams) >= ECHO_SHARE


def looping(answer: str) -> bool:
    """A line repeated again and again, or the same 8-word runs over and over."""
    lines = [ln.strip().lower() for ln in answer.splitlines() if len(ln.strip()) > 10]
    if lines and Counter(lines).most_common(1)[0][1] >= LOOP_LINES:
        return True
    grams = _grams(_words(answer))
    return len(grams) >= 20 and len(set(grams)) / len(grams) < LOOP_SHARE


def copied(answer: str, material: str) -> bool:
    """Most of the answer's lines stand verbatim in the material it was to condense."""
    lines = [ln.strip(" -*•\t") for ln in answer.splitlines()]
    lines = [ln for ln in lines if len(ln) > 20]
    if len(lines) < 3:
        return False
    return sum(ln in material for ln in lines) / len(lines) >= COPY_SHARE


# A line given as a turn of the conversation ("User: …", "assistant: …").
ROLE_LINE = re.compile(r"^[\s*•-]*(user|assistant|system|human|ai)\s*:", re.I | re.M)
# Words that open a line spoken to the reader rather than about the people: the second
# person, a greeting, an assistant's offer; and a letter's closing line.
TO_READER = re.compile(
    r"^[\s*•-]*(?:you(?:'re|'ve|'ll|'d)?|your|yours|hi|hello|hey|dear|greetings|"
    r"let me know|feel free|i hope this|hope this helps|is there anything)\b", re.I | re.M)
SIGNATURE = re.compile(
    r"^\s*(?:best(?: wishes| regards)?|kind regards|regards|cheers|sincerely|warmly|"
    r"yours(?: truly)?|with love|all the best|take care)\s*(?:[,!]\s*[\w .-]{0,40})?\s*$",
    re.I | re.M)  # the closing alone on its line, or with a name after its comma
# What a model can make up: a number, an address, a name in the middle of a sentence.
NUMBER = re.compile(r"\d{1,18}")
ADDRESS = re.compile(r"(?:https?://|www\.)[^\s)>\]]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.I)
NAME = re.compile(r"(?<![\w'’])[A-Z][\w'’-]*[a-z][\w'’-]*")
# Before these, a capitalized word starts a sentence or an item, not necessarily a name.
OPENS = re.compile(r"(?:^|[.!?:;\n\"“(\[]|^\s*[-*•]|\n\s*[-*•])\s*$")
# Calendar words a model writes from a date given as digits ("2023-09" -> "September").
MONTHS = ("january february march april may june july august september october november "
          "december").split()
CALENDAR = frozenset(MONTHS + "monday tuesday wednesday thursday friday saturday sunday".split())
# Numbers written in words, general English: a model writes "1 October" for "the first of
# October" and "16 weeks" for "sixteen weeks".
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = ("zeroth first second third fourth fifth sixth seventh eighth ninth tenth "
             "eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth "
             "eighteenth nineteenth").split()
_TENTHS = "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()


def _number_words() -> dict[str, int]:
    words = {w: n for n, w in enumerate(_UNITS)} | {w: n for n, w in enumerate(_ORDINALS)}
    for i, (tens, tenth) in enumerate(zip(_TENS, _TENTHS, strict=True)):
        n = 20 + 10 * i
        words |= {tens: n, tenth: n}
        for unit in range(1, 10):
            words[f"{tens}-{_UNITS[unit]}"] = words[f"{tens}-{_ORDINALS[unit]}"] = n + unit
    return words | {"dozen": 12, "hundred": 100, "thousand": 1000}


NUMBER_WORDS = _number_words()
# "the third person" in instructions names no number (unless said elsewhere: see Grounds).
_PERSON = re.compile(r"\b(?:first|second|third) person\b")


def in_list(text: str, at: int) -> bool:
    """Whether position `at` is in a line that is a list of short items ("Kai, Rome,
    plan"): no sentence, so its first word is as much a name as the others."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    items = text[start : end if end >= 0 else len(text)].strip(" -*•\t.").split(",")
    return len(items) >= 3 and all(0 < len(item.split()) <= 3 for item in items)


_POSSESSIVE = re.compile(r"(?:['’]s|s['’])$")


def name_forms(word: str) -> set[str]:
    """The forms a word takes as a name in English, lowercased: itself, without a
    possessive ("Mira's", "the Smiths'"), and singular or plural ("the Smiths" for a
    Smith)."""
    word = word.lower().strip("'’-")
    bare = _POSSESSIVE.sub(lambda m: "s" if m.group(0).startswith("s") else "", word)
    return {w for w in (word, bare, bare[:-1] if bare.endswith("s") else bare + "s") if w}


@dataclass(frozen=True)
class Grounds:
    """What a source mentions, read once: the facts job checks each of a batch's facts
    against one long prompt, and reading it again for each was most of the job's CPU."""

    lowered: str
    words: frozenset[str]
    numbers: frozenset[int]
    names: frozenset[str]  # every word's forms (name_forms), and a hyphened word's parts

    @classmethod
    def of(cls, source: str) -> Grounds:
        lowered = source.lower()
        words = frozenset(re.findall(r"[\w'’-]+", lowered))
        # By value, and a month named in words gives its number: "7 May 2023" -> 2023-05-07;
        # so does a number in words ("sixteen"), and a date a dated turn implies
        # ("yesterday" said on 17 September 2023: 16 September 2023; see dates.implied).
        numbers = {int(n) for n in NUMBER.findall(source)}
        numbers |= {i + 1 for i, month in enumerate(MONTHS) if month in words}
        spelled = frozenset(re.findall(r"[\w'’-]+", _PERSON.sub(" ", lowered))) \
            if "person" in words else words
        numbers |= {n for word, n in NUMBER_WORDS.items() if word in spelled}
        numbers |= implied(source)
        names = frozenset(f for word in words for part in {word, *word.split("-")}
                          for f in name_forms(part))
        return cls(lowered, words, frozenset(numbers), names)


def ungrounded(answer: str, source: str | Grounds) -> list[str]:
    """The numbers, addresses and mid-sentence names of `answer` that `source` (the
    prompt: instructions, material and the memory it was given) never mentions."""
    grounds = source if isinstance(source, Grounds) else Grounds.of(source)
    missing = [a for a in ADDRESS.findall(answer)
               if a.lower().rstrip(".,") not in grounds.lowered]
    rest = ADDRESS.sub(" ", answer)
    missing += [n for n in NUMBER.findall(rest) if int(n) not in grounds.numbers]
    for match in NAME.finditer(rest):
        word = match.group(0).rstrip("'’-")
        if known(word, grounds):
            continue
        if OPENS.search(rest[max(0, match.start() - 40) : match.start()]) and \
                not in_list(rest, match.start()):
            continue  # a sentence's first word: a capital says nothing there
        missing.append(word)
    return list(dict.fromkeys(missing))


def known(word: str, grounds: Grounds) -> bool:
    """Whether a capitalized word is one the source says, or a calendar word, in any of
    its forms (name_forms); a hyphened word when each of its capitalized parts is
    ("Todmorden-based" where Todmorden is said; not "Jean-Luc" for a Jean)."""
    forms = name_forms(word)
    if forms & grounds.names or forms & CALENDAR:
        return True
    parts = [p for p in word.split("-") if p[:1].isupper()]
    return "-" in word and all(known(p, grounds) for p in parts)


def replayed(answer: str, prompt: Prompt) -> str | None:
    """A line of a summary that opens as the turns it condenses do ("Mia: …"), where the
    turns are named by speaker rather than by role: the speaker's prefix, or None."""
    if prompt.task not in ("summarize", "merge"):
        return None
    heads = Counter(item.split(":", 1)[0].strip().lower() for item in prompt.items
                    if ":" in item and len(item.split(":", 1)[0].split()) <= 3)
    speakers = {head for head, n in heads.items() if n >= 2}
    for line in answer.splitlines():
        head, colon, _ = line.strip(" -*•\t").partition(":")
        if colon and head.strip().lower() in speakers:
            return head.strip() + ":"
    return None


def source_of(prompt: Prompt) -> str:
    """What an answer may draw on: the material and the instructions (which name the
    people), without the prompt's worked example (an answer that copies it is made up)."""
    example = str(prompt.context.get("example", ""))
    system = prompt.system.replace(example, " ") if example else prompt.system
    return system + "\n" + prompt.user


def _empty(text: str, prompt: Prompt) -> str | None:
    return None if text else "empty answer"


def _markers(text: str, prompt: Prompt) -> str | None:
    marker = MARKERS.search(text)
    return f"chat-template or prompt marker {marker.group(0)!r} in the answer" if marker \
        else None


def _loop(text: str, prompt: Prompt) -> str | None:
    return "the answer repeats itself in a loop" if looping(text) else None


def _echo(text: str, prompt: Prompt) -> str | None:
    return "the answer echoes the instructions" if echoed(text, prompt.system) else None


def _copy(text: str, prompt: Prompt) -> str | None:
    return "the answer copies the material instead of condensing it" \
        if copied(text, prompt.user) else None


def _replay(text: str, prompt: Prompt) -> str | None:
    role = ROLE_LINE.search(text)
    said = role.group(0).strip() if role else replayed(text, prompt)
    return f"the answer replays the conversation ({said!r} lines)" if said else None


def _reader(text: str, prompt: Prompt) -> str | None:
    reader = TO_READER.search(text) or SIGNATURE.search(text)
    return (f"the answer speaks to the reader ({reader.group(0).strip()[:30]!r}), not about "
            "them") if reader else None


def _grounded(text: str, prompt: Prompt) -> str | None:
    made_up = ungrounded(text, source_of(prompt))
    return f"the answer names what its input does not: {', '.join(made_up[:4])}" \
        if made_up else None


Check = Callable[[str, Prompt], "str | None"]
# Each check by name, in the order an answer meets them. JSON answers (facts, reflections)
# meet the first three here and the rest field by field in their jobs.
CHECKS: dict[str, Check] = {
    "empty": _empty, "markers": _markers, "loop": _loop, "echo": _echo, "copy": _copy,
    "replay": _replay, "reader": _reader, "grounded": _grounded}
FOR_JSON = ("empty", "markers", "loop")
# The checks whose failure a second request can mend: they are about the answer's form,
# and the request asked again says what was wrong with it (AGAIN). A model that named
# what its input does not, or wrote about something else, read the material that way: the
# same model, asked the same thing again, writes the same (and a capable one was right,
# the guard wrong, more often than not), so those are not asked again.
MENDABLE = frozenset({"empty", "markers", "loop", "echo", "copy", "replay", "reader",
                      # a JSON answer's shape: not JSON, a field missing or wrong, a turn
                      # id not given (the request asked again says which)
                      "json", "shape", "turns"})
AGAIN = {
    "empty": "Your previous answer was empty: write the answer.",
    "markers": "Answer with the text itself: no markup, tags or template markers.",
    "loop": "Write each point once: no line or phrase repeated.",
    "echo": "Do not repeat these instructions: write the answer they ask for.",
    "copy": "Condense the material in your own words: do not copy its lines.",
    "replay": "Write about the people in the third person: no lines of the conversation, "
              "no speaker's name followed by a colon.",
    "reader": "Write about the people in the third person, not to a reader: no greeting, "
              "offer or signature.",
}


@dataclass(frozen=True)
class Refusal:
    """Why an answer must not become memory: the check that refused it, in words."""

    check: str
    why: str

    @property
    def mendable(self) -> bool:
        return self.check in MENDABLE


def refusal(answer: str, prompt: Prompt) -> Refusal | None:
    """The first check `answer` fails, or None when it may become memory."""
    text = answer.strip()
    for name in FOR_JSON if prompt.task in JSON_TASKS else CHECKS:
        why = CHECKS[name](text, prompt)
        if why is not None:
            return Refusal(name, why)
    return None


def junk(answer: str, prompt: Prompt) -> str | None:
    """Why `answer` must not become memory, or None when it may."""
    found = refusal(answer, prompt)
    return found.why if found else None

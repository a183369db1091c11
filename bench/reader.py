"""Reader checks: what a person reading the memory would stumble on, tier by tier.

- stage directions: markup such as `[shares an image: ...]` anywhere in a tier;
- gist lines that open with a greeting, thanks or an interjection (general English, and
  the words the conversation itself uses as interjections);
- the self-state's topics: three or more, none an interjection, a caption word, a
  speaker, a function word or a calendar word;
- era spread: a month talked about on three or more days has an era whose lines come
  from three or more of those days (each line traced to the turn nearest it in meaning);
- agreement breaks: a verb that does not agree with its subject, as a rewriting into the
  third person can leave it (`let Jake knows`, `Jake evens got`, `Jake want`, `Jake's
  sister and Jake is going`);
- the narrative's open threads: dated before the last conversation (a plan long past),
  or leaning on a conversation the reader does not have (`it`, `them`).

Checks read the tiers as text only; none uses dreamd's own producers' rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np

from dreamd.backends.protocols import Embedder
from dreamd.text.speech import CALENDAR, STOPWORDS, inflection, lemmas

_STAGE = re.compile(r"\[[^\]]*\]")
# General English: what opens a line that greets, thanks or reacts. A word of the second
# set counts only before punctuation ("Great!"; not "Great Dane").
GREETING = frozenset("""hi hey heya hiya hello howdy yo greetings thanks thank thx ty cheers
    congrats congratulations bye goodbye wow whoa woah omg haha hahaha hehe lol lmao aw aww
    awww yay ooh oops yikes phew ugh""".split())
REACTION = frozenset("""oh ah ha hah hmm um uh yes yeah yep yup no nope ok okay sure cool
    nice great awesome amazing wonderful lovely fantastic brilliant perfect well wait damn
    gosh jeez sorry morning evening afternoon night welcome exactly totally absolutely
    definitely indeed true right""".split())
_CAPTION = frozenset({"shares", "image", "photo", "picture"})
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
_DATED = re.compile(r"\b(\d{1,2}) (January|February|March|April|May|June|July|August|"
                    r"September|October|November|December) (\d{4})\b")
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_LEANING = re.compile(r"\b(?:it|them|they)\b(?!['’])", re.IGNORECASE)


def _senses(word: str) -> dict[str, tuple[str, ...]]:
    return lemmas(word.lower())


def _third_person_verb(word: str) -> bool:
    """A verb's -s form ("knows", "goes"), as English's dictionary has it."""
    low = word.lower()
    return any(low != v and low in (inflection(v, "VBZ") or ())
               for v in _senses(low).get("VERB", ()))


def _finite_verb(word: str) -> bool:
    low = word.lower()
    verbs = _senses(low).get("VERB", ()) + _senses(low).get("AUX", ())
    return any(low != v and (low in (inflection(v, "VBD") or ())
                             or low in (inflection(v, "VBZ") or ())) for v in verbs)


_OBJECT_THEN_BARE = re.compile(
    r"\b(?:let|lets|make|makes|made|help|helps|helped|watch|watched|hear|heard|saw|see|"
    r"can|could|will|would|should|must|might|may|did|does|do)\s+([A-Z][a-z]+)\s+([a-z]+)\b")
_NAME_THEN_TWO = re.compile(r"\b([A-Z][a-z]+)\s+([a-z]+?)(e?s)\s+([a-z]+)\b")
_OPENING_NAME = re.compile(r"^(?:-\s*)?(?:[^:]{1,12}:\s+)?([A-Z][a-z]+)\s+([a-z]+)\b(?: (\w+))?")
# Two people as one subject, told with the verb of one: "Jake's sister and Jake is going".
# Where a subject stands: a line's start (after its bullet and day) or after a comma.
_TWO_AS_ONE = re.compile(r"(?:^(?:-\s*)?(?:\d{1,2} [A-Z][a-z]{2}:\s*)?|,\s+)"
                        r"(?:[A-Z][a-z]+['’]s [a-z]+|[A-Z][a-z]+) and [A-Z][a-z]+ "
                        r"(?:(?:just|also|still|never|always|both) )?(is|was|has|[a-z]+s)\b")
# After a verb, not a noun: "Jake want to", "Jake love the" (and not "Hibs match on").
_VERB_NEXT = frozenset("to the a an his her their its it that this them him".split())


def agreement_breaks(text: str) -> list[str]:
    """Where a verb does not agree with its subject, outside quotation marks."""
    found = []
    for line in text.splitlines():
        plain = _QUOTED.sub('""', line)
        for m in _OBJECT_THEN_BARE.finditer(plain):
            if not _senses(m.group(1)) and _third_person_verb(m.group(2)):
                found.append(m.group())  # "let Jake knows"
        for m in _NAME_THEN_TWO.finditer(plain):
            stem = m.group(2) if m.group(3) == "s" else m.group(2) + "e"
            senses = _senses(stem) or _senses(m.group(2))
            whole = _senses(m.group(2) + m.group(3))  # "sometimes" is an adverb itself
            if not _senses(m.group(1)) and "ADV" in senses and "ADV" not in whole \
                    and _finite_verb(m.group(4)):
                found.append(m.group())  # "Jake evens got"
        for m in _TWO_AS_ONE.finditer(plain):
            if m.group(1) in ("is", "was", "has") or _third_person_verb(m.group(1)):
                found.append(m.group())  # "Jake's sister and Jake is going"
        start = _OPENING_NAME.match(plain)
        if start and not _senses(start.group(1)) and start.group(1).lower() not in CALENDAR:
            verb = start.group(2)
            senses = _senses(verb)
            nounish = "NOUN" in senses and (start.group(3) or "").lower() not in _VERB_NEXT
            past_of_another = any(verb in (inflection(v, "VBD") or ())
                                  for v in senses.get("VERB", ()) if v != verb)  # "found"
            if verb in senses.get("VERB", ()) and not nounish and not past_of_another \
                    and not {"ADJ", "ADV", "AUX"} & set(senses) \
                    and inflection(verb, "VBZ") and verb not in (inflection(verb, "VBD") or ()):
                found.append(start.group())  # "Jake want to ..."
    return found


def _body(line: str) -> str:
    """A gist line without its bullet, its speaker and an opening quotation mark."""
    line = line.strip().removeprefix("- ")
    head, sep, rest = line.partition(": ")
    if sep and len(head.split()) <= 3:
        line = rest
    return line.lstrip("\"“'")


def opens_with_greeting(line: str, odd: set[str]) -> bool:
    m = re.match(r"([A-Za-z']+)(\W?)", _body(line))
    if not m:
        return False
    word, after = m.group(1), m.group(2)
    low = word.lower()
    if low in GREETING or word in odd:
        return True
    return low in REACTION and after in (",", "!", ".", "")


@dataclass
class Checks:
    """One conversation's reader checks."""

    staged: int = 0
    gist_lines: int = 0
    greeting_lines: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    clean_topics: list[str] = field(default_factory=list)
    busy_eras: int = 0
    spread_eras: int = 0
    era_days: list[tuple[str, int]] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    open_threads: int = 0
    past_threads: list[str] = field(default_factory=list)
    leaning_threads: list[str] = field(default_factory=list)


def tier_texts(export: dict[str, Any]) -> list[str]:
    """Every tier's text: gists, profile, eras, narrative and the self-state's words."""
    texts = [g["content"] for g in export["gists"]]
    texts += [(export.get("profile") or {}).get("content", "")]
    texts += [e["content"] for e in export["eras"]]
    texts += [(export.get("narrative") or {}).get("content", "")]
    data = (export.get("reflection") or {}).get("data") or {}
    texts += [str(data.get(k, "")) for k in ("self_narrative", "reflection")]
    texts += [str(t) for t in data.get("topics", [])]
    return [t for t in texts if t]


def checked(export: dict[str, Any], turns: Iterable[Any], speakers: set[str], odd: set[str],
            embedder: Embedder) -> Checks:
    """The reader checks of one conversation's export; `turns` its turns (with
    session_id, created_at, content), `odd` the words it uses as interjections."""
    out = Checks()
    texts = tier_texts(export)
    out.staged = sum(len(_STAGE.findall(t)) for t in texts)
    for gist in export["gists"]:
        for line in gist["content"].splitlines():
            if line.strip() and not line.startswith("About: "):
                out.gist_lines += 1
                if opens_with_greeting(line, odd):
                    out.greeting_lines.append(line)
    data = (export.get("reflection") or {}).get("data") or {}
    out.topics = [str(t) for t in data.get("topics", [])]
    lowered = {s.lower() for s in speakers}
    out.clean_topics = [t for t in out.topics
                        if t not in odd and t.lower() not in _CAPTION | STOPWORDS | CALENDAR
                        and t.lower() not in lowered and t.lower() not in GREETING | REACTION]
    for text in texts:
        out.breaks += agreement_breaks(text)
    _eras(export, list(turns), embedder, out)
    _narrative(export, list(turns), out)
    return out


def _eras(export: dict[str, Any], turns: list[Any], embedder: Embedder, out: Checks) -> None:
    by_month: dict[str, list[Any]] = {}
    for turn in turns:
        by_month.setdefault(turn.created_at[:7], []).append(turn)
    for era in export["eras"]:
        month_turns = by_month.get(era["month"], [])
        days = {t.created_at[:10] for t in month_turns}
        if len(days) < 3:
            continue
        out.busy_eras += 1
        marked = [re.match(r"^-\s*(?:(\d{1,2}) ([A-Z][a-z]{2}):\s*)?(.*)", ln)
                  for ln in era["content"].splitlines()[1:] if ln.strip()]
        lines = [m.group(3) for m in marked if m]
        if not lines:
            out.era_days.append((era["month"], 0))
            continue
        # A line's day: the one it is marked with where a conversation was held that day
        # (the mark may be a day the line names instead), else its nearest turn's.
        vectors = embedder.embed(lines + [t.content for t in month_turns])
        nearest = np.argmax(vectors[:len(lines)] @ vectors[len(lines):].T, axis=1)
        drawn = set()
        for m, i in zip([m for m in marked if m], nearest, strict=True):
            day = f"{era['month']}-{int(m.group(1)):02d}" if m.group(1) else ""
            drawn.add(day if day in days else month_turns[i].created_at[:10])
        out.era_days.append((era["month"], len(drawn)))
        out.spread_eras += len(drawn) >= 3


def _narrative(export: dict[str, Any], turns: list[Any], out: Checks) -> None:
    last = max((t.created_at[:10] for t in turns), default="")
    for line in ((export.get("narrative") or {}).get("content") or "").splitlines():
        if not line.lstrip("- ").startswith("open:"):
            continue
        out.open_threads += 1
        days = [date(int(y), _MONTHS.index(mo) + 1, int(d)).isoformat()
                for d, mo, y in _DATED.findall(line) if 1 <= int(d) <= 31]
        if days and last and max(days) < last:
            out.past_threads.append(line)
        if _LEANING.search(_QUOTED.sub('""', line)):
            out.leaning_threads.append(line)


@dataclass
class Totals:
    """The reader checks summed over conversations."""

    conversations: int = 0
    staged: int = 0
    gist_lines: int = 0
    greeting_lines: int = 0
    states: int = 0
    states_with_three: int = 0
    topics: int = 0
    clean_topics: int = 0
    busy_eras: int = 0
    spread_eras: int = 0
    breaks: int = 0
    open_threads: int = 0
    past_threads: int = 0
    leaning_threads: int = 0

    def add(self, c: Checks) -> None:
        self.conversations += 1
        self.staged += c.staged
        self.gist_lines += c.gist_lines
        self.greeting_lines += len(c.greeting_lines)
        self.states += 1
        self.states_with_three += len(c.clean_topics) >= 3
        self.topics += len(c.topics)
        self.clean_topics += len(c.clean_topics)
        self.busy_eras += c.busy_eras
        self.spread_eras += c.spread_eras
        self.breaks += len(c.breaks)
        self.open_threads += c.open_threads
        self.past_threads += len(c.past_threads)
        self.leaning_threads += len(c.leaning_threads)

    def line(self, label: str) -> str:
        return (f"reader {label:<8} stage directions {self.staged}; gist lines opening with a "
                f"greeting/thanks/interjection {self.greeting_lines} of {self.gist_lines}; "
                f"self-states with >=3 clean topics {self.states_with_three} of {self.states} "
                f"(clean topics {self.clean_topics} of {self.topics}); busy months' eras from "
                f">=3 days {self.spread_eras} of {self.busy_eras}; agreement breaks "
                f"{self.breaks}; open threads {self.open_threads} (past {self.past_threads}, "
                f"leaning on the talk {self.leaning_threads})")


def detail(label: str, c: Checks) -> str:
    return (f"reader {label:<8} staged {c.staged}; greeting lines {len(c.greeting_lines)} of "
            f"{c.gist_lines} {[ln[:50] for ln in c.greeting_lines[:3]]}; topics {c.topics}; "
            f"era days {c.era_days}; breaks {c.breaks[:4]}; open {c.open_threads} past "
            f"{len(c.past_threads)} leaning {len(c.leaning_threads)}")

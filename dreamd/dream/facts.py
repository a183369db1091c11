"""Facts a friend would remember, from what people said — offline, sentence by sentence.

A fact is one short statement about a person in the third person, names resolved and
relative dates made absolute ("Sam adopted a dog called Biscuit (Sunday 12 July 2026)"),
with the day it became true when the conversation says so, and what it is about when
that is a thing a person has one of at a time (home, job, partner, a race's result): a
later fact about the same thing replaces it.

Kept: statements that carry information about a person — names, places, numbers, dates,
possessions, roles, plans, preferences. Dropped: questions, acknowledgements,
pleasantries, and passing feelings with nothing else in them. Pure: no clock, no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from dreamd.dream.dates import day_of, long_date, resolve
from dreamd.dream.keys import in_names
from dreamd.models import Fact
from dreamd.text import CALENDAR, NAME_THEN_VERB, STOPWORDS

MAX_CHARS = 300  # a fact is a sentence, not a paragraph

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])")
_OPENERS = re.compile(
    r"^(?:(?:big |great |good |some |i have )?news|ok(?:ay)?|yes(?: please)?|yeah|yep|no|"
    r"maybe|until then|but(?: first)?|and|a few|not yet|"
    r"sure|thanks?(?: you)?|haha|lol|wow|cool|nice|great|good idea|fair enough|honestly|"
    r"well|so|also|actually|anyway|oh|hey|hi|hello)\b[\s,:!.-]*", re.IGNORECASE)
_NOT_ABOUT_ANYONE = re.compile(r"^(?:that|this|it|which|those|these|there)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'll|I'd|my|me|mine|we|our|us)\b")
_NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|"
                     r"twelve|fifteen|twenty|thirty|hundred|thousand)\b", re.IGNORECASE)
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zà-ÿ]+(?:\s[A-Z][a-zà-ÿ]+)*")
# Words that say something lasting about a life: roles, possessions, people, plans,
# preferences, events. A sentence with none of them, no name and no number says little.
_CUES = re.compile(
    r"\b(?:moved?|moving|live[sd]?|living|relocat\w+|flat|apartment|house|home|lease|rent|"
    r"landlord|landlady|job|work(?:s|ed|ing)?|role|promot\w+|hired|fired|quit|offer\w*|"
    r"manager|boss|colleague|team|company|startup|developer|engineer|teacher|nurse|"
    r"doctor|student|lead|career|salary|retired|adopt\w*|dog|cat|puppy|kitten|pet|"
    r"sister|brother|mother|mum|mom|father|dad|son|daughter|wife|husband|partner|"
    r"girlfriend|boyfriend|fianc\w+|married|wedding|divorc\w+|engaged|baby|pregnant|"
    r"born|birthday|friend|neighbou?rs?|race|marathon|half|run|ran|km|miles|finish\w*|"
    r"goal|plan\w*|signed up|sign up|decided|started|starting|ended|"
    r"passed|exam|course|class\w*|degree|learn\w*|study\w*|love[sd]?|hate[sd]?|prefer\w*|"
    r"favou?rite|allergic|vegetarian|vegan|play(?:s|ed)?|instrument|guitar|piano|"
    r"saxophone|violin|paint\w*|teach\w*|volunteer\w*|bought|sold|car|bike|"
    r"drinks?|drinking|eats?|eating|diet|habit\w*|every (?:morning|day|evening|night|week)|"
    r"switch\w*|stopped|no longer|anymore|instead|gave up)\b",
    re.IGNORECASE)
_PASSING = re.compile(
    r"\b(?:tired|exhausted|sleepy|hungry|bored|busy|stressed|worried|nervous|anxious|"
    r"overwhelmed|embarrassed|sore|lonely|excited|terrified|happy|sad|destroyed|rough day|"
    r"cramped|brutal)\b", re.IGNORECASE)
_NOW_ONLY = re.compile(r"\b(?:tonight|today|this (?:morning|afternoon|evening)|right now)\b",
                       re.IGNORECASE)
_SMALL_TALK = re.compile(r"\b(?:by the way|how are you|see you|good night|take care)\b",
                         re.IGNORECASE)

# What a fact is about, when a person has one of it at a time: a newer fact replaces it.
ABOUT: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("home", r"\b(?:moved (?:in)?to|lives? in|lived in|living in|relocat\w+ to|"
                 r"found a (?:flat|house|apartment))"),
        ("job", r"\b(?:works? (?:as|at|for)|worked (?:as|at|for)|working (?:as|at|for)|"
                r"job (?:as|at)|(?:got|started|start|found) a new job|promot\w+|"
                r"tech lead|hired as|quit (?:his|her|their) job|became (?:a|an|the) \w+)"),
        ("partner", r"\b(?:(?:my|his|her) (?:girlfriend|boyfriend|wife|husband|partner|"
                    r"fianc\w+)|married|engaged|broke up|divorc\w+)"),
        ("half marathon", r"\bhalf(?:[- ]marathon)? in \d"),
        ("marathon", r"\b(?<!half )marathon in \d"),
    ))
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Candidate:
    """A fact as extraction proposes it, before it meets the facts already known."""

    subject: str
    statement: str
    about: str | None  # "job", "home", ...: what a newer fact of the subject replaces
    valid_from: str | None  # ISO date it became true, when the text says
    said_at: str  # when it was said (the turn's time)


_THIRD = {"am": "is", "do": "does", "don't": "doesn't", "have": "has", "go": "goes",
          "was": "was"}
_BASE_VERBS = ("work", "live", "love", "like", "want", "need", "play", "teach", "prefer",
               "hate", "run", "speak", "know", "think", "feel", "own", "drink", "eat",
               "study", "enjoy", "miss", "plan", "hope", "volunteer", "paint", "write")


def agree(statement: str, subject: str) -> str:
    """The verb after a name made third person: "Sam work as" -> "Sam works as"."""
    def third(m: re.Match[str]) -> str:
        verb = m.group(2)
        if verb in _THIRD:
            return f"{m.group(1)} {_THIRD[verb]}"
        if verb.endswith("y") and verb not in ("play", "enjoy"):
            return f"{m.group(1)} {verb[:-1]}ies"
        return f"{m.group(1)} {verb}{'es' if verb.endswith(('s', 'sh', 'ch', 'o')) else 's'}"
    verbs = "|".join(map(re.escape, (*_THIRD, *_BASE_VERBS)))
    return re.sub(rf"\b({re.escape(subject)}(?: (?:also|really|just|still|never|often))?) "
                  rf"({verbs})\b", third, statement)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.replace("\n", " ")) if s.strip()]


_VERB_FIRST = re.compile(r"^(?:[A-Z][a-z]+ed|Went|Did|Ran|Got|Had|Made|Took|Saw|Met|Found|"
                         r"Bought|Sold|Won|Lost|Left|Began|Spent|Finished|Started)\b")


def informative(sentence: str) -> bool:
    """Whether a sentence says something lasting about someone."""
    bare = _OPENERS.sub("", sentence).strip()
    words = _WORD.findall(bare)
    if len(words) < 4 or len(bare) > MAX_CHARS or bare.endswith("?"):
        return False
    if _NOT_ABOUT_ANYONE.match(bare) or _SMALL_TALK.search(bare):
        return False
    named = bool(_PROPER.search(bare))
    number = bool(_NUMBER.search(bare))
    cue = bool(_CUES.search(bare))
    if _PASSING.search(bare) and not named:
        return False  # a feeling of the moment
    if _OPENERS.match(sentence) and not (number or _STRONG.search(bare)
                                         or _INTRODUCES.search(bare)):
        return False  # a reply to a suggestion ("Good idea, I'll ask ...")
    if _NOW_ONLY.search(bare) and not (named or number or cue):
        return False
    content = [w for w in words if w.lower() not in STOPWORDS]
    return len(content) >= 2 and (named or number or cue)


# Cues strong enough to keep a sentence that opens as a reply.
_STRONG = re.compile(r"\b(?:moved|adopted|married|engaged|promot\w+|offered|accepted|"
                     r"signed up|passed|finished|bought|born|died|quit|hired)\b",
                     re.IGNORECASE)


# Someone in the speaker's life, introduced by name ("my manager Rui").
_INTRODUCES = re.compile(
    r"\b[Mm]y (?:manager|boss|colleague|sister|brother|mother|mum|mom|father|dad|son|"
    r"daughter|wife|husband|partner|girlfriend|boyfriend|fianc\w+|friend|neighbou?r|"
    r"landlord|landlady|coach|teacher|doctor) [A-Z][a-zà-ÿ]+")


# A statement that says something stopped or changed: with the embedder's nearest current
# fact of the same person, it replaces that fact ("Sam switched to tea" ends "Sam drinks
# coffee every morning").
CHANGE = re.compile(r"\b(?:switched|switching|changed|stopped|quit|no longer|not \w+ any ?more|"
                    r"anymore|gave up|instead of|now (?:prefers?|drinks?|eats?|uses?|plays?))\b",
                    re.IGNORECASE)


def about(statement: str, subject: str) -> str | None:
    """What a statement about `subject` says they have one of at a time, if anything."""
    if subject not in statement:
        return None
    for name, pattern in ABOUT:
        if pattern.search(statement):
            return name
    return None


def _tidy(sentence: str) -> str:
    bare = _OPENERS.sub("", sentence).strip().rstrip(",;: ")
    return bare[:1].upper() + bare[1:] if bare else bare


_ABSOLUTE = re.compile(r"\((?:[A-Z][a-z]+day )?(\d{1,2}) ([A-Z][a-z]+) (\d{4})\)")
_MONTHS = ("January February March April May June July August September October November "
           "December").split()


def became_true(statement: str, said: date | None) -> str | None:
    """The first day-precise date a statement resolves to, else the day it was said."""
    m = _ABSOLUTE.search(statement)
    if m and m.group(2) in _MONTHS:
        return date(int(m.group(3)), _MONTHS.index(m.group(2)) + 1, int(m.group(1))).isoformat()
    return said.isoformat() if said else None


_THIRD_PERSON = re.compile(r"\b(?:he|she|they|him|his|her|them|their)\b", re.IGNORECASE)
_NAME_WORD = re.compile(r"\b[A-Z][a-zà-ÿ]+\b")
_PLACE_BEFORE = re.compile(r"\b(?:in|at|to|from|near|into|around|of|for|visit\w*)\s+$",
                           re.IGNORECASE)


def people_named(text: str, known: tuple[str, ...]) -> list[str]:
    """The people `text` names, in order, as far as words show it: a capitalized word
    inside a sentence that does not follow a place word ("from Manchester"), or one
    opening a sentence as its subject ("Ana says ..."); not the `known` speakers, not
    calendar or common words."""
    found = []
    for sentence in sentences(text):
        for m in _NAME_WORD.finditer(sentence):
            word = m.group()
            if word in known or word.lower() in STOPWORDS or word.lower() in CALENDAR \
                    or word.endswith("ing"):
                continue
            if m.start() == 0:
                if not NAME_THEN_VERB.match(sentence):
                    continue
            elif _PLACE_BEFORE.search(sentence[:m.start()]):
                continue
            found.append(word)
    return found


# "she"/"he" and "him" stand for a person; "her" does where no noun follows it ("showing
# her Belém", "with her."), "his"/"her" before a noun are the person's ("her time").
_PRONOUNS = re.compile(
    r"\b(?:(?P<subject>[Ss]he|[Hh]e)(?P<is>['’]s)?|(?P<object>him|her(?=[\s,.!?;:]*(?:$|[A-Z]|"
    r"(?:the|a|an|to|at|in|on|with|and|about|around|for|from|too|again|back|up|out)\b)))|"
    r"(?P<owner>his|her)(?=\s+[a-z]))\b")


def resolve_people(tidy: str, before: str, known: tuple[str, ...]) -> str:
    """A sentence's "she", "he", "him" and "her" given the name of the one person the words
    just before it (earlier in the turn, or the turn before) name; unchanged when they
    name nobody, or more than one person."""
    if not _PRONOUNS.search(tidy):
        return tidy
    named = set(people_named(before, known))
    if len(named) != 1:
        return tidy  # nobody, or more than one: a guess would put words in a mouth
    name = named.pop()

    def named_as(m: re.Match[str]) -> str:
        if m.group("is"):
            return f"{name} is"
        return f"{name}'s" if m.group("owner") else name
    return _PRONOUNS.sub(named_as, tidy)


def extract(speaker: str, content: str, said_at: str, addressee: str | None,
            previous: str = "") -> list[Candidate]:
    """The facts in one turn, in the third person: `speaker` is the person's name;
    `previous`, the turn before, names whom a "she" or "he" may mean."""
    said = day_of(said_at)
    out: list[Candidate] = []
    told: list[str] = []  # this turn's sentences so far
    known = (speaker, addressee) if addressee else (speaker,)
    for sentence in sentences(content):
        told.append(sentence)
        if not informative(sentence):
            continue
        plain = _tidy(sentence)
        tidy = resolve_people(plain, " ".join([previous, *told[:-1]]), known)
        named_other = tidy != plain  # "She ..." became "Ana ...", "her" "Ana"
        if _VERB_FIRST.match(tidy):  # "Moved into the new flat" -> "Sam moved into ..."
            tidy = f"{speaker} {tidy[:1].lower()}{tidy[1:]}"
        elif not _FIRST_PERSON.search(sentence) and not out and not (
                _PROPER.search(tidy) or _NUMBER.search(tidy)):
            continue  # about something unnamed ("Boxes everywhere, but ...")
        text = resolve(tidy, said) if said else tidy
        statement = agree(in_names(text, speaker, addressee), speaker)
        if named_other:
            # About someone else, now by name ("Ana is running the half too"): a fact of
            # its own, told by the speaker.
            out.append(Candidate(speaker, statement[:MAX_CHARS], None,
                                 became_true(statement, said), said_at))
            continue
        if not _FIRST_PERSON.search(sentence) and out:
            # A sentence that goes on about what the last one said ("her name is Biscuit")
            # belongs to it.
            last = out.pop()
            merged = f"{last.statement.rstrip('.!')}; {statement}"[:MAX_CHARS]
            out.append(Candidate(speaker, merged, last.about or about(merged, speaker),
                                 last.valid_from, said_at))
            continue
        # Without the speaker's name it is the speaker's telling: their own news when it
        # names no one else ("Half marathon in 1 hour 57"), but "She moved to Porto" is
        # someone else's move, and replaces nothing of the speaker's.
        someone_else = speaker not in statement and bool(_THIRD_PERSON.search(statement))
        if speaker not in statement:
            statement = f"{speaker}: {statement}"
        statement = statement[:1].upper() + statement[1:]
        out.append(Candidate(speaker, statement[:MAX_CHARS],
                             None if someone_else else about(statement, speaker),
                             became_true(statement, said), said_at))
    return out


# Topics of a profile, in order: a fact goes under the first whose words it has.
TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("Home", r"\b(?:moved|live[sd]?|living|flat|apartment|house|rent|lease|landlord|"
                 r"landlady|neighbou?rs?|city)\b"),
        ("Work", r"\b(?:work\w*|job|role|team|manager|boss|colleague|company|startup|office|"
                 r"developers?|engineers?|lead|promot\w+|career|coding|clients?)\b"),
        ("People", r"\b(?:sister|brother|mother|mum|mom|father|dad|son|daughter|wife|"
                   r"husband|partner|girlfriend|boyfriend|friend|married|family)\b"),
        ("Pets", r"\b(?:dog|cat|puppy|kitten|pet|adopt\w*)\b"),
        ("Sport and health", r"\b(?:run\w*|ran|race|marathon|km|miles|training|gym|swim\w*|"
                             r"yoga|knee|stretch\w*|doctor)\b"),
        ("Learning", r"\b(?:course|class\w*|exam|school|study\w*|learn\w*|language|"
                     r"lesson\w*|degree|Portuguese|Spanish|French|German)\b"),
        ("Plans", r"\b(?:will|going to|plan\w*|want\w* to|decided|sign up|next)\b"),
    ))
OTHER = "Other"


def topic(statement: str) -> str:
    return next((name for name, pattern in TOPICS if pattern.search(statement)), OTHER)


def since(fact: Fact) -> str:
    """" (since 24 October 2026)" for a fact about a thing held at a time, when dated."""
    if fact.about is None or not fact.valid_from:
        return ""
    day = day_of(fact.valid_from)
    if day is None or long_date(day) in fact.statement:
        return ""
    return f" (since {long_date(day)})"


def weight(fact: Fact) -> int:
    """How much a fact tells: a thing held at a time, then another name, then a number."""
    said = re.sub(r"\([^)]*\)", "", fact.statement)  # not the resolved dates
    others = [w for w in _PROPER.findall(said)
              if w != fact.subject and w.lower() not in CALENDAR]
    return 4 * (fact.about is not None) + 2 * bool(others) + bool(_NUMBER.search(said))


# Words that only make sense beside the conversation they were said in: "we" and "us"
# left as they were, "it" and "them" pointing back at something said before.
_LEANS_ON_CONTEXT = re.compile(r"\b(?:we|us|our|it(?!['’])|them|each of them)\b",
                               re.IGNORECASE)


def stands_alone(fact: Fact) -> bool:
    """Whether a fact reads on its own, as a profile line must: about its subject by name,
    and, when it has no topic, without words that lean on the conversation."""
    if fact.about is not None:
        return True
    if not fact.statement.startswith((f"{fact.subject} ", f"{fact.subject}'s ")):
        return False
    return topic(fact.statement) != OTHER or not _LEANS_ON_CONTEXT.search(fact.statement)


def profile_from(facts: list[Fact], max_lines: int, per_topic: int = 4) -> str:
    """The current facts that read on their own, grouped by topic, the newest first within
    a topic; replaced facts are not part of a profile. At most `max_lines` facts."""
    current = [f for f in facts if f.current and stands_alone(f)]
    subjects = list(dict.fromkeys(f.subject for f in current))
    groups: dict[tuple[str, str], list[Fact]] = {}
    # What a person has one of at a time (job, home) first, then facts with a name or a
    # number in them, the newest first.
    for fact in sorted(current, key=lambda f: (weight(f), f.valid_from or f.learned_at, f.id),
                       reverse=True):
        groups.setdefault((fact.subject, topic(fact.statement)), []).append(fact)
    order = [name for name, _ in TOPICS] + [OTHER]
    lines: list[str] = []
    left = max_lines
    for subject in subjects:
        for name in order:
            chosen = groups.get((subject, name), [])[:min(per_topic, left)]
            if not chosen:
                continue
            heading = name if len(subjects) == 1 else f"{subject}: {name}"
            lines.append(f"{heading}:")
            lines += [f"- {f.statement}{since(f)}" for f in chosen]
            left -= len(chosen)
    return "\n".join(lines)


_PAST_QUESTION = re.compile(
    r"\b(?:before|used to|previous\w*|former\w*|earlier|originally|at first|back then|"
    r"last year|ago|in (?:19|20)\d\d|when did|how long|changed?|no longer|anymore)\b",
    re.IGNORECASE)


def asks_about_the_past(query: str) -> bool:
    """Whether a query is about how things were, not how they are."""
    return bool(_PAST_QUESTION.search(query))


def fact_line(fact: Fact) -> str:
    """A fact as the context block shows it: with its day, and its end if it ended."""
    if not fact.current:
        end = day_of(fact.valid_to) if fact.valid_to else None
        return f"{fact.statement} (no longer true{f' since {long_date(end)}' if end else ''})"
    return f"{fact.statement}{since(fact)}"


def when(fact: Fact) -> str:
    """The day a fact became true, else the day it was said."""
    return (fact.valid_from or fact.learned_at)[:10]


# Words that point back at something said before ("Sam wrote it", "each of them").
_POINTS_BACK = re.compile(r"\b(?:it(?!['’])|them|they)\b", re.IGNORECASE)


def era_from(facts: list[Fact], month: str, max_lines: int) -> str:
    """A month's dated events: the facts that became true in it (or were told in it), in
    order, replaced ones too — they were true then; not the ones without a topic that
    point back at their conversation."""
    chosen = [f for f in facts if when(f)[:7] == month
              and (f.about is not None or topic(f.statement) != OTHER
                   or not _POINTS_BACK.search(f.statement))]
    chosen.sort(key=lambda f: (when(f), f.id))
    if len(chosen) > max_lines:  # keep what a person has one of, then the first told
        keep = sorted(chosen, key=lambda f: (f.about is None, when(f), f.id))[:max_lines]
        chosen = [f for f in chosen if f in keep]
    lines = []
    for f in chosen:
        day = day_of(when(f))
        mark = f"{day.day} {_MONTHS[day.month - 1][:3]}" if day else when(f)
        lines.append(f"- {mark}: {f.statement}")
    return "\n".join(lines)


_PLAN = re.compile(r"\b(?:will|going to|plan\w*|want\w* to|decided to|sign(?:ed)? up|"
                   r"starting|next (?:week|month|year))\b", re.IGNORECASE)


def narrative_from(facts: list[Fact], since: str, max_lines: int) -> str:
    """What changed since `since` (an ISO date) and the threads still open: what replaced
    what, with its day, then recent plans and goals."""
    by_id = {f.id: f for f in facts}
    changes = []
    for old in facts:
        new = by_id.get(old.replaced_by) if old.replaced_by is not None else None
        if new is not None and when(new) >= since:
            changes.append(f"- {old.about}: {new.statement} (before: {old.statement})")
    threads = [f"- open: {f.statement}" for f in facts
               if f.current and when(f) >= since and _PLAN.search(f.statement)]
    return "\n".join((changes + threads)[:max_lines])

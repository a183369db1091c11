"""Facts as memory shows them: a profile, a month's era, the narrative, a context line.

Pure: the facts in, text out. What a fact is and where it comes from is dreamd.text.facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

import numpy as np

from dreamd.models import Fact
from dreamd.text import speech
from dreamd.text.dates import day_of, long_date
from dreamd.text.facts import MONTHS, NUMBER, PROPER
from dreamd.text.speech import CALENDAR

# Topics of a profile, in order: the areas of a life, in general English (not any one
# conversation's words). A fact goes under the first whose words it has.
TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("Home", r"\b(?:mov(?:e|ed|ing) (?:in|to|into|out|house|back)|live[sd]?|living|flat|"
                 r"apartment|house|home|rent\w*|lease|landlord|landlady|neighbou?r\w*|"
                 r"hometown|grew up)\b"),
        ("Work", r"\b(?:work(?:s|ed|ing|er|ers|place)?|jobs?|roles?|position|career|office|"
                 r"boss|manager|colleagues?|co-?workers?|company|business|clients?|"
                 r"customers?|promot\w+|hired|fired|salary|shift|interview\w*|startup|"
                 r"employ\w*|retire\w*|profession\w*)\b"),
        ("Family", r"\b(?:wife|husband|partner|girlfriend|boyfriend|fianc\w+|married|wedding|"
                   r"engaged|divorc\w+|mother|mum|mom|father|dad|parents?|sisters?|"
                   r"brothers?|sons?|daughters?|kids?|child|children|bab(?:y|ies)|"
                   r"grand\w+|aunt|uncle|cousins?|nephew|niece|family|pregnant|"
                   r"in-laws?|twins)\b"),
        ("Friends", r"\b(?:friends?|friendship|buddy|buddies)\b"),
        ("Pets", r"\b(?:dogs?|cats?|pupp(?:y|ies)|kittens?|pets?|horses?|rabbits?|"
                 r"hamsters?|parrots?|birds?|fish|tortoise)\b"),
        ("Health", r"\b(?:doctor|hospital|ill|illness|sick|injur\w+|surgery|operation|"
                   r"therap\w+|diagnos\w+|pain|"
                   r"medication|allerg\w+|diet|sleep\w*|anxiety|depress\w+|"
                   r"blood|recover\w*|health\w*)\b"),
        ("Sport", r"\b(?:run|runs|running|ran|marathon|race|gym|yoga|swim\w*|cycl\w+|"
                  r"hik\w+|football|soccer|tennis|basketball|climb\w*|training|trains|"
                  r"match|league|workouts?|exercis\w+|fitness|ski(?:s|ing|ed)?|surf(?:s|ing|ed)?)\b"),
        ("Interests", r"\b(?:paint\w*|draw(?:s|ing|ings)?|music|musician|guitar|piano|drums?|"
                      r"violin|sing(?:s|ing|er|ers)?|songs?|band|concerts?|books?|read(?:s|ing)?|"
                      r"writ(?:e|es|ing)|knit\w*|sew\w*|garden\w*|"
                      r"cook\w*|bak(?:e|es|ing)|photograph\w*|games?|gaming|movies?|"
                      r"films?|art|artist|craft\w*|hobby|hobbies|collect\w*)\b"),
        ("Learning", r"\b(?:school|class(?:es)?|(?<!of )course|lessons?|stud(?:y|ies|ying)|exams?|"
                     r"degree|university|college|learn\w*|language|students?|graduat\w+|"
                     r"thesis|certificat\w+)\b"),
        ("Travel", r"\b(?:trip|travel\w*|vacation|holiday|flights?|visit\w*|abroad|"
                   r"tour(?:s|ing|ed)?)\b"),
        ("Food and drink", r"\b(?:coffee|tea|food|eat\w*|restaurant|vegetarian|vegan|"
                           r"recipes?|dinner|breakfast|lunch|drinks?|beer|wine)\b"),
        ("Plans", r"\b(?:will|going to|gonna|plan\w*|want\w* to|hop(?:e|es|ing) to|goal|"
                  r"dream|decided|next (?:week|month|year|summer|spring|autumn|winter))\b"),
    ))
OTHER = "Other"


# A denial a few words before an area's word, in the same clause: "doesn't surf", "has
# never been to a gym", "no longer runs".
_DENIED = re.compile(r"(?:\bnot|n['’]t|\bnever|\bno longer|\bno)(?:\s+[\w'’-]+){0,3}\s*$",
                     re.IGNORECASE)


def topic(statement: str) -> str:
    """The first of TOPICS whose words the statement says, and does not deny."""
    for name, pattern in TOPICS:
        if any(not _DENIED.search(statement[:m.start()]) for m in pattern.finditer(statement)):
            return name
    return OTHER


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
    others = [w for w in PROPER.findall(said)
              if w != fact.subject and w.lower() not in CALENDAR]
    return 4 * (fact.about is not None) + 2 * bool(others) + bool(NUMBER.search(said))


# Words that only make sense beside the conversation they were said in: "we" and "us"
# left as they were, "it" and "them" pointing back at something said before.
_LEANS_ON_CONTEXT = re.compile(r"\b(?:we|us|our|it(?!['’])|them|each of them)\b",
                               re.IGNORECASE)
_DEMONSTRATIVE = re.compile(r"\b(?:this|these)\b(?:\s+(\w[\w'’-]*))?", re.IGNORECASE)


# "that" or "those" before a thing said earlier ("loved that pie", "those summers"), or
# standing for it at a clause's end ("loved that."); a "that" joining clauses ("a studio
# that designs", "thinks that schools") has a verb, a subject or a name after it.
_THAT = re.compile(r"\b(?:that|those)\b(?:\s+([a-z][\w'’-]*)|(?=\s*[.,;:!?)]|\s*$))",
                   re.IGNORECASE)
# Someone other than the line's subject: "him", and "her" where no thing of hers follows
# ("talked to her afterwards"; not "her first steps"). ("he", "she" and "his" may be the
# subject's own in a line a model wrote: "Mia said she would come".)
_SOMEONE = re.compile(r"\b(?:him|her)\b(?:\s+([a-z][\w'’-]*))?")
_NAMED_BEFORE = re.compile(r"['’]s\s+[\w-]+|\b([A-Za-z][\w-]*)")

# A verb of starting or stopping whose object the talk gave ("Mia started when she was
# nine", "never quit."): started what? Followed by no word, a comma, a word that opens a
# clause, or a when ("last year", "in May"), not by its object ("quit smoking").
_STARTED = re.compile(r"\b(?:start(?:s|ed)?|beg[ai]n|begins|begun|stop(?:s|ped)?|quits?|"
                      r"finish(?:es|ed)?|join(?:s|ed)?)\b(?!['’])\s*([,.;!?]|$)?\s*(\w*)\s*(\w*)",
                      re.IGNORECASE)
_THEN = frozenset("""when because after before since and but so as while until again
    already recently today yesterday tonight last this next""".split())


# What a person, not a thing, puts before such a verb: a pronoun, "and" or "to" of a verb
# already theirs, an auxiliary or a modal (the stems of "don't", "won't", "can't" too).
_PERSON_BEFORE = frozenset("i he she they we and to do does did has have had wo ca".split()) \
    | speech.MODALS


# One thing like another, where the line does not say which ("did something similar", "had
# a similar accident"): not "similar to ...", "... as ...", nor things of a kind ("films
# with similar endings").
_SIMILAR = re.compile(r"\b(?:something|anything|nothing|a)\s+similar\b(?![^.,;:!?]*\b(?:to|as)\b)",
                      re.IGNORECASE)


def _object_left_to_the_talk(text: str, subject: str) -> bool:
    for m in _STARTED.finditer(text):
        before = [w for w in speech.WORD.findall(text[:m.start()])
                  if w.lower() not in speech.ADVERBS_BEFORE_A_VERB]
        last = re.sub(r"n['’]t$", "", before[-1].lower()) if before else ""
        if not before or (before[-1] != subject and last not in _PERSON_BEFORE):
            continue  # a thing starts or stops ("after fieldwork finishes")
        stop, word, after = m.group(1), m.group(2).lower(), m.group(3).lower()
        if stop is not None or word in _THEN or (word in ("in", "on") and (
                after in CALENDAR or after[:1].isdigit())):
            return True
    return False


def points_at_the_talk(text: str, subject: str = "") -> bool:
    """Whether a line leans on what was shown or said around it: a "this" or "these"
    that stands for a thing ("painted this after the march", "these are mine"), not before
    the thing it names ("made this bowl", "these kids", "this year", "these 3 dogs"); a
    "that" or "those" pointing back at one ("loved that pie"); a "him" or "her" for whom
    nothing before it in the line (a name other than `subject`'s, a noun) stands; a
    verb of starting or stopping whose object the talk gave ("started when she was nine");
    one thing like another the line does not name ("did something similar")."""
    for m in _DEMONSTRATIVE.finditer(text):
        after = (m.group(1) or "").lower()
        if not (after and after not in speech.STOPWORDS
                and (after[0].isdigit() or speech.thing_word(after)
                     or speech.describing(after))):
            return True
    for m in _THAT.finditer(text):
        after = m.group(1)
        if after is None:
            if not re.search(r"\ball (?:of )?$", text[:m.start()], re.IGNORECASE):
                return True  # "loved that."; not "books, toys, all of that."
            continue
        # "those" always points ("those summers"); "that" before a noun and no verb.
        if after not in speech.STOPWORDS and "NOUN" in speech.senses(after) and (
                m.group().lower().startswith("those") or not speech.finite(after)):
            return True
    if _object_left_to_the_talk(text, subject) or _SIMILAR.search(text):
        return True
    return any(not _stands_for(text[:m.start()], subject) for m in _SOMEONE.finditer(text)
               if not _owned_by(m))


def _owned_by(m: re.Match[str]) -> bool:
    """Whether a "her" is a possessive: a word naming or describing a thing after it."""
    after = m.group(1)
    return m.group().startswith("her") and after is not None \
        and after not in speech.STOPWORDS \
        and (speech.thing_word(after) or speech.describing(after))


def _stands_for(before: str, subject: str) -> bool:
    """Whether `before`, the words of a line ahead of a "him" or "her", hold someone or
    something it may stand for: a noun, a word after an "'s" ("Mia's youngest"), a name
    inside the line other than `subject`'s."""
    for m in _NAMED_BEFORE.finditer(before):
        word = m.group(1)
        if word is None:
            return True  # "Mia's youngest", "Mia's dad"
        if word == subject or word.lower() in speech.STOPWORDS:
            continue
        if (word[0].isupper() and m.start() > 0) or speech.thing_word(word.lower()):
            return True
    return False


def stands_alone(fact: Fact) -> bool:
    """Whether a fact reads on its own, as a profile line must: about its subject by name,
    or quoting them on someone they name (`Lea: "Omar is 7"`); without words that lean
    on the conversation ("it", "them", "we")."""
    if fact.about is not None:
        return True
    quote = fact.statement.removeprefix(f'{fact.subject}: "')
    if quote != fact.statement:
        return speech.opens_with_name(quote) and not _leans_on_the_talk(quote, fact.subject)
    return fact.statement.startswith((f"{fact.subject} ", f"{fact.subject}'s ")) \
        and not _leans_on_the_talk(fact.statement, fact.subject)


def _leans_on_the_talk(text: str, subject: str) -> bool:
    return bool(_LEANS_ON_CONTEXT.search(text)) or points_at_the_talk(text, subject)


# Cosine (all-MiniLM-L6-v2) from which a fact says much what a weightier one of the same
# person already says, and the profile leaves it out: two facts of one person about one
# thing, a change or a step on, sit at 0.53-0.80 (see dreamd.dream.jobs.facts.CHANGED);
# the facts job merges only from 0.9, where the words barely differ.
SAYS_THE_SAME = 0.8


# Who a person is, before what they do: the topics of what they have one of at a time.
WHO = ("Work", "Home", "Family")
HELD = {"job": "Work", "home": "Home", "partner": "Family"}


def profile_from(facts: list[Fact], per_person: int, per_topic: int = 3,
                 listeners: tuple[str, ...] = (), sureness: Mapping[int, float] | None = None,
                 vectors: Mapping[int, np.ndarray] | None = None,
                 areas: Mapping[int, str] | None = None) -> str:
    """The current facts that read on their own, grouped by person and topic, the weightiest
    and newest first within a topic; replaced facts are not part of a profile. At most
    `per_person` facts of each person; with more than one person, "About <name>:" heads
    each person's groups once (not the name before every group). `sureness`, fact id ->
    the selector's chance that it is worth keeping (dreamd.dream.selector), weighs a fact
    where it is known, in place of the names and numbers it holds. With the facts'
    `vectors` (the selector's embedder's), a fact that says much what a weightier one of
    its person says is left out, and the next one takes its place. A thing held at a time
    goes under its own topic (a job under Work); any other under the one `areas` (fact id
    -> topic, by what the fact means: dreamd.dream.areas) gives it, else the first whose
    words it has. Each person's topics run from who they are (work, home, family) to their
    main pursuits: the topics they have most facts in first."""
    def area(f: Fact) -> str:
        return HELD.get(f.about or "", "") or (areas or {}).get(f.id) or topic(f.statement)

    current = [f for f in facts if f.current and stands_alone(f)]
    subjects = list(dict.fromkeys(f.subject for f in current))
    # A line about one person that names another they talk with ("Mia would love to see
    # Leo's painting") is about their talk, not about a life.
    talking = {name for name in (*subjects, *listeners) if name.strip()}
    named = {name: re.compile(rf"\b{re.escape(name)}\b") for name in talking}
    current = [f for f in current
               if not any(named[o].search(f.statement) for o in talking - {f.subject})]
    subjects = list(dict.fromkeys(f.subject for f in current))
    groups: dict[tuple[str, str], list[Fact]] = {}
    # What a person has one of at a time (job, home) first, then the facts the selector is
    # surest of (without it, those with a name or a number in them), the newest first.
    def rank(f: Fact) -> tuple[float, str, int]:
        weighed = weight(f) if sureness is None else \
            4 * (f.about is not None) + sureness.get(f.id, 0.0)
        return weighed, f.valid_from or f.learned_at, f.id

    for fact in sorted(current, key=rank, reverse=True):
        groups.setdefault((fact.subject, area(fact)), []).append(fact)
    known = [name for name, _ in TOPICS] + [OTHER]
    lines: list[str] = []
    indent = "  " if len(subjects) > 1 else ""
    for subject in subjects:
        rest = sorted((n for n in known if n not in WHO and n != OTHER),
                      key=lambda n: -len(groups.get((subject, n), [])))  # stable: ties keep
        order = [*WHO, *rest, OTHER]
        mine = {name: list(groups.get((subject, name), [])) for name in order}
        taken = chosen(mine, order, per_person, per_topic)
        # A line that says much what a weightier shown line says gives way to the next.
        while (again := repeated(taken, rank, vectors)) is not None:
            mine[next(name for name in order if again in mine[name])].remove(again)
            taken = chosen(mine, order, per_person, per_topic)
        if indent and any(taken.values()):
            lines.append(f"About {subject}:")
        for name in order:
            if taken[name]:
                lines.append(f"{indent}{name}:")
                lines += [f"{indent}- {f.statement}{since(f)}" for f in taken[name]]
    return "\n".join(lines)


def chosen(groups: dict[str, list[Fact]], order: list[str], per_person: int,
           per_topic: int) -> dict[str, list[Fact]]:
    """One person's facts shown, by topic: up to `per_topic` of each topic first, so no
    one topic crowds out the rest; room left over goes to the topics with more to say,
    in their order (each group the weightiest first)."""
    taken = {name: groups[name][:per_topic] for name in order}
    room = per_person - sum(map(len, taken.values()))
    while room < 0:  # more topics than room: the last ones give way
        name = next(n for n in reversed(order) if taken[n])
        taken[name].pop()
        room += 1
    for name in order:
        more = groups[name][len(taken[name]):][:room]
        taken[name] += more
        room -= len(more)
    return taken


def repeated(taken: dict[str, list[Fact]], rank: Callable[[Fact], Any],
             vectors: Mapping[int, np.ndarray] | None) -> Fact | None:
    """The first shown fact, weightiest first, that says much what one shown before it
    says (by their `vectors`); None when none does."""
    if not vectors:
        return None
    before: list[np.ndarray] = []
    for fact in sorted((f for facts in taken.values() for f in facts), key=rank,
                       reverse=True):
        vector = vectors.get(fact.id)
        if vector is None:
            continue
        if before and float(np.max(np.stack(before) @ vector)) >= SAYS_THE_SAME:
            return fact
        before.append(vector)
    return None


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


# Words that point back at something said before ("Sam wrote it", "each of them"), and a
# line that opens on someone or something it does not name ("He ate Sam's bucket", "It's
# cheaper than the old one").
_POINTS_BACK = re.compile(r"\b(?:it(?!['’])|them|they)\b|^(?:He|She|It)\b", re.IGNORECASE)


def era_from(facts: list[Fact], month: str, max_lines: int,
             sureness: Mapping[int, float] | None = None) -> str:
    """A month's dated events: the facts that became true in it (or were told in it),
    replaced ones too — they were true then; not the ones that point back at their
    conversation ("it", "them"), unless they are about a thing held at a time. A month
    talked about on many days is drawn from all of them: each day's weightiest fact first
    (a thing held at a time, then the selector's surest, `sureness`, or without it the
    names and numbers a fact holds), then each day's next; the weightiest first."""
    chosen = [f for f in facts if when(f)[:7] == month
              and (f.about is not None or not _POINTS_BACK.search(f.statement))
              and not points_at_the_talk(f.statement, f.subject)]

    def rank(f: Fact) -> tuple[float, str, int]:
        weighed = weight(f) if sureness is None else \
            4 * (f.about is not None) + sureness.get(f.id, 0.0)
        return -weighed, when(f), f.id

    by_day: dict[str, list[Fact]] = {}
    for f in sorted(chosen, key=rank):
        by_day.setdefault(f.learned_at[:10], []).append(f)
    drawn: list[Fact] = []
    depth = 0
    while len(drawn) < max_lines and any(len(day) > depth for day in by_day.values()):
        drawn += sorted((day[depth] for day in by_day.values() if len(day) > depth), key=rank)
        depth += 1
    lines = []
    for f in drawn[:max_lines]:
        day = day_of(when(f))
        mark = f"{day.day} {MONTHS[day.month - 1][:3]}" if day else when(f)
        lines.append(f"- {mark}: {f.statement}")
    return "\n".join(lines)


_PLAN = re.compile(r"\b(?:will|going to|plan\w*|want\w* to|decided to|sign(?:ed)? up|"
                   r"starting|next (?:week|month|year))\b", re.IGNORECASE)


def reminder(statement: str, most: int = 70) -> str:
    """A statement as far as its first clause, or its first `most` characters ending on a
    word ("Sam just moved to Leeds last week …"): what a reminder of it needs."""
    clause = re.split(r"(?<=\w)[,;:](?=\s)| \(", statement, maxsplit=1)[0].rstrip(".!")
    if len(clause) <= most:
        return clause if clause == statement.rstrip(".!") else f"{clause} …"
    return clause[:most].rsplit(" ", 1)[0] + " …"


# A plan said this long before the latest conversation, with no day of its own, is
# taken as past: a season, not a benchmark's figure (what "next month" or "this summer"
# reaches).
PLAN_DAYS = 92


def narrative_from(facts: list[Fact], since: str, max_lines: int) -> str:
    """What changed since `since` (an ISO date) and the threads still open: what replaced
    what, with its day, then the plans and goals not yet past — by the days they name, or,
    naming none, said within PLAN_DAYS of the latest conversation — that read on their
    own."""
    by_id = {f.id: f for f in facts}
    changes = []
    for old in facts:
        new = by_id.get(old.replaced_by) if old.replaced_by is not None else None
        if new is not None and when(new) >= since:
            what = old.about or "changed"  # a job, a home, a partner; else what it says
            changes.append(f"- {what}: {new.statement} (before: {reminder(old.statement)})")
    present = max((f.learned_at[:10] for f in facts), default="")
    threads = [f"- open: {f.statement}" for f in facts
               if f.current and when(f) >= since and _PLAN.search(f.statement)
               and stands_alone(f) and not past(f, present)]
    return "\n".join((changes + threads)[:max_lines])


_DAY = re.compile(r"\b(\d{1,2}) (" + "|".join(MONTHS) + r") (\d{4})\b")


def past(fact: Fact, present: str) -> bool:
    """Whether a plan is behind `present` (an ISO date, the latest conversation's): every
    day it names is, or it names none and was said more than PLAN_DAYS before."""
    days = []
    for d, month, year in _DAY.findall(fact.statement):
        try:
            days.append(date(int(year), MONTHS.index(month) + 1, int(d)).isoformat())
        except ValueError:
            continue
    if days:
        return max(days) < present
    said, now = day_of(fact.learned_at), day_of(present) if present else None
    return bool(said and now and (now - said).days > PLAN_DAYS)

"""Facts a friend would remember, from what people said — offline, sentence by sentence.

A fact is one short statement about a person in the third person, names resolved and
relative dates made absolute ("Sam adopted a dog called Biscuit (Sunday 12 July 2026)"),
or the person quoted where the third person would be a guess; with the day it became
true when the conversation says so, and what it is about when that is a thing a person
has one of at a time (home, job, partner): a later fact about the same thing replaces it.

This module proposes: every statement a turn makes about someone, not questions, orders,
greetings, hand-overs or what is said about the one spoken to. Which proposals are worth
keeping is dreamd.dream.selector's to say. Pure: no clock, no model.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date

from dreamd.text import speech
from dreamd.text.dates import day_of, resolve
from dreamd.text.speech import CALENDAR, STOPWORDS

MAX_CHARS = 300  # a fact is a sentence, not a paragraph

_WORD = re.compile(r"\w+")
NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|"
                    r"twelve|fifteen|twenty|thirty|hundred|thousand)\b", re.IGNORECASE)
PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zà-ÿ]+(?:\s[A-Z][a-zà-ÿ]+)*")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'll|I'd|[Mm]y|[Mm]e|[Mm]ine|[Ww]e|[Oo]ur|[Uu]s)\b")
# What opens a sentence as a call or a reaction: one or two words before a comma, a dash
# or an exclamation mark ("Wow, Priya, ...", "Thanks Omar! ...", "Oh no - ...").
_LEAD = re.compile(r"^([\w'’]+(?:\s[\w'’]+)?)\s*(?:,|!|:|\.\.\.|…|—|–|\s-)\s*")
_CONTRACTION_TAILS = frozenset("m s ve ll d re t".split())  # of "I'm", "it's", "don't"
# An announcement before the news: "Update: I got the allotment", "Big day: we ...".
_ANNOUNCED = re.compile(r"^[^:\d]{1,24}:\s+(?=(?:I|I['’]\w+|[Mm]y|[Ww]e|[Oo]ur)\b)")
# A feeling before the news: "I'm so relieved, my visa came through!".
_FEELING_FIRST = re.compile(r"^I['’]m (?:so |really |very |just |super |quite )?(\w+)\s*"
                            r"[,!—–-]\s*")
# An adverb before the speaker's own: "Luckily my landlord ...", "Frankly I ...".
_ADVERB_FIRST = re.compile(r"^([A-Z][a-z]+ly)\s+(?=(?:I|my|we|our|me)\b)")
# Words that make an opening a sentence's own subject or time, not a call ("My dog, ...",
# "She, too, ...").
_HOLDS = frozenset("i i'm i've my me we our us you your he she it they his her their its "
                   "this that these those there".split())
_SMALL_TALK = re.compile(r"\b(?:by the way|how are you|see you|good night|take care|"
                         r"talk (?:to you )?(?:soon|later))\b", re.IGNORECASE)


# News announced and not told: what it is comes in a sentence of its own ("We've got
# news!", "Also, I have some big news too.").
_NEWS_UNTOLD = re.compile(
    r"^(?:\w+,\s+)?(?:I|we)(?:['’]ve|\s+have)?(?:\s+got|\s+have|\s+had)?\s+"
    r"(?:some\s+)?(?:\w+\s+)?news(?:\s+(?:too|also|as well|to share|to tell you|for you))?"
    r"\s*[.!]*$", re.IGNORECASE)
# A sentence that hands something over: "Here's a photo from the hike", "Here are ...".
# A wish passed on to someone ("Kisses to Jun!", "Best wishes to Ana"): tells nothing.
_SENT_ON = re.compile(r"^(?:(?:big|lots of|many|all my)\s+)?(?:kisses|hugs|love|regards|"
                      r"greetings|best wishes|good luck|congrat\w*|condolences)\s+to\s+"
                      r"(\w+)[^,]*$", re.IGNORECASE)
_HANDED = re.compile(r"^(?:here(?:['’]s| is| are| it is)|there you go)\b", re.IGNORECASE)
# A sentence about someone else: a name or a third person as its subject ("Grandpa broke his
# hip", "She is 9").
_OTHER_SUBJECT = re.compile(r"^(?:[A-Z][a-zà-ÿ]+|[Ss]he|[Hh]e|[Tt]hey|[Hh]is|[Hh]er|[Tt]heir)\b"
                            r"(?:['’]s)?\s+\w+")
_OWN_SUBJECT = re.compile(r"\b(?:I|I['’]m|I['’]ve|I['’]ll|I['’]d|we|we['’]re|we['’]ve)\b")


# A word that joins a sentence to the one before it ("And I sold the car", "So I'm off"):
# a line of memory stands on its own. Closed-class English. A "so" before a describing
# word or an adverb is a degree, and its phrase the sentence's own ("So far I can ..."),
# but for a quantity, which stands without it ("So much has happened" -> "Much has ...").
_JOINED = re.compile(r"^(?:and|so|plus|but|also|anyway|besides)\b,?\s+(?=[\w'’])",
                     re.IGNORECASE)
_SO_WHAT = re.compile(r"^so\s+([a-z]+)\b", re.IGNORECASE)
_QUANTITY = frozenset("much many few little more most".split())
# An auxiliary that stands for a verb the question gave: "I did", "we haven't", "she does".
_AUXILIARY = (r"(?:do|does|did|have|has|had|am|is|are|was|were|will|would|can|could|"
              r"should|shall|might|must|may|ca|wo|sha)(?:n['’]t|\s+not)?")
# A sentence that ends on one after its subject (an adverb between, a word like "too" or
# "actually" after): an answer. Not "in May", nor "I wrote my will".
_ENDS_ON_AUXILIARY = re.compile(
    rf"\b(?:I|[Ww]e|[Yy]ou|[Hh]e|[Ss]he|[Tt]hey|[Ii]t|[A-Z][a-z]+)"
    rf"(?:\s+(?:\w+ly|just|still|never|also|already|always|so))?\s+{_AUXILIARY}"
    r"(?:,?\s+(?:too|either|though|\w+ly))?\W*$")
# A web address ("twitch.tv/...", "etsy.com/shop/..."): no verb, whatever its first word.
_ADDRESS = re.compile(r"[\w-]+\.[a-z]{2,}(?:/|\b)")
# After "Ines, ": who she is, between commas ("my sister, runs ..."): Ines is the subject,
# not someone called.
_WHO_THEY_ARE = re.compile(r"(?:my|our|his|her|their|your)\s+[\w'’ -]{1,30}?,\s", re.IGNORECASE)
# Interjections that open a line written without a comma after them ("yeah i moved",
# "ok add me"), but not those that take an object ("thanks to my sister ...").
_OPENERS = (speech.INTERJECTIONS | {"ok", "okay"}) - {
    "thank", "thanks", "congrats", "congratulations", "greetings", "cheers"}
_BARE_OPENER = re.compile(r"^([A-Za-z]+)\s+(?=[a-z]|I\b|I['’])")
# An answer's clause opening a sentence that then tells something with its own subject or
# a word joining one: "I did, my gran taught me", "We have, and the bees ...".
_ANSWER_FIRST = re.compile(rf"^(?:I|we|he|she|they|it)\s+{_AUXILIARY}\s*,\s*(?=(?:I|I['’]\w+|"
                           r"my|we|our|you|your|he|his|she|her|they|their|it|and|but)\b)",
                           re.IGNORECASE)


def _unjoined(text: str) -> str:
    m = _SO_WHAT.match(text)
    if m and m.group(1).lower() not in _QUANTITY and (
            speech.describing(m.group(1)) or speech.adverb(m.group(1))):
        return text
    return _JOINED.sub("", text)


def bare(sentence: str, known: tuple[str, ...] = ()) -> str:
    """A sentence without what opens it as a call or a reaction ("Oh, Priya, I sold the
    car" -> "I sold the car"): openings of one or two words that hold no number, no date,
    no pronoun, and no name but the speakers'; and without a word joining it to the
    sentence before ("And", "So", "Plus")."""
    text = sentence
    while m := _LEAD.match(text := _unjoined(text)):
        opening = m.group(1)
        words = opening.split()
        held = [w for w in words[:-1] if w.lower() in _HOLDS]
        held += [words[-1]] if words[-1].lower() in _HOLDS - {"my"} else []  # "Oh my, ..."
        if (any(c.isdigit() for c in opening) or held
                or any(w[:1].isupper() and w not in known for w in words[1:])
                or resolve(opening, date(2000, 1, 1)) != opening
                or (m.group().rstrip().endswith(",") and _WHO_THEY_ARE.match(text[m.end():]))):
            break
        text = text[m.end():]
    while (m := _BARE_OPENER.match(text)) and m.group(1).lower() in _OPENERS:
        text = _unjoined(text[m.end():])  # "omg my cousin ...", lower case and no comma
    m = _ANSWER_FIRST.match(text)
    if m:
        text = _unjoined(text[m.end():])
    m = _ANNOUNCED.match(text)
    if m and len(_WORD.findall(text[m.end():])) >= 4:
        text = text[m.end():]
    m = _ADVERB_FIRST.match(text)
    if m and speech.adverb(m.group(1)):
        text = text[m.end():]
    m = _FEELING_FIRST.match(text)
    if m and speech.describing(m.group(1)) and len(_WORD.findall(text[m.end():])) >= 3:
        text = text[m.end():]  # "I'm so relieved, my visa came through!"
    return text[:1].upper() + text[1:] if text else text


def proposed(bare: str) -> bool:
    """Whether a sentence (its opening call left out) may tell something about someone:
    a statement of three words or more, one of them not a function word, that is not a
    question, not said about the one spoken to, not an order, a wish or a greeting, and
    does not end on a modal or a "to" whose verb the talk supplies ("Maybe we should").
    Which of these are worth keeping is the selector's to say (dreamd.dream.selector)."""
    words = _WORD.findall(bare)
    if len(words) < 3 or len(bare) > MAX_CHARS or bare.rstrip().endswith("?"):
        return False
    if speech.said_to_the_other(bare) or speech.ordered(bare) or _SMALL_TALK.search(bare) \
            or _HANDED.match(bare) or _NEWS_UNTOLD.match(bare) or _sent_on(bare):
        return False
    if words[0].lower() in speech.INTERJECTIONS and all(
            w[:1].isupper() or w.lower() in STOPWORDS for w in words[1:]):
        return False  # "Hi Auntie Margaret!": a call and the names it calls
    if (words[-1] in speech.MODALS or words[-1].lower() == "to") and "," not in bare:
        # "Maybe I should.", "I'd love to.": a modal or a "to" ending a one-clause sentence
        # leaves its verb to the talk (not "in May.", nor "I quit sugar, my doctor said I
        # should.").
        return False
    if _ENDS_ON_AUXILIARY.search(bare) and bare.count(",") <= 1 and len(words) <= 6:
        return False  # "I haven't.", "We really did!", "We have, actually.": an answer
    return any(w.lower() not in STOPWORDS and w.lower() not in _CONTRACTION_TAILS
               for w in words)


def _sent_on(bare: str) -> bool:
    """A wish passed on to someone: "Kisses to Jun!" (not "Love to cook for friends")."""
    m = _SENT_ON.match(bare)
    return m is not None and not speech.base_verb(m.group(1))


@dataclass(frozen=True)
class Candidate:
    """A fact as extraction proposes it, before it meets the facts already known."""

    subject: str
    statement: str
    about: str | None  # "job", "home", ...: what a newer fact of the subject replaces
    valid_from: str | None  # ISO date it became true, when the text says
    said_at: str  # when it was said (the turn's time)


# What a fact is about, when a person has one of it at a time: a newer fact replaces it.
# Each pattern reads what follows the subject's name (and any adverbs: "Sam just moved
# to Porto"), so "Sam wants to live in Paris" or "Sam's sister got married" replace
# nothing of Sam's.
ABOUT: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern)) for name, pattern in (
        ("home", r"^(?:moved (?:back )?(?:in)?to (?:[A-Z]|(?:a|an|the|\w+'s) (?:new )?"
                 r"(?:flat|house|apartment|home|place|city|town|village))|"
                 r"(?:lives|is living|has lived) in|relocated to|"
                 r"(?:found|bought|rented) (?:a|an|the) (?:new )?"
                 r"(?:flat|house|apartment|home|place))"),
        ("job", r"^(?:works (?:as|at|for)|is working (?:as|at|for)|"
                r"started working (?:as|at|for)|"
                r"(?:was |got |has been |just got )?promoted\b|was hired as|"
                r"(?:got|started|found|took|accepted|was offered|has been offered) "
                r"(?:a|an|the) (?:[\w-]+ ){0,3}(?:job|role|position|post)\b|"
                r"quit \w+'s job|is (?:a|an|the) (?:new )?[\w-]+ at [A-Z])"),
        ("partner", r"^(?:(?:got|is|was) (?:married|engaged)\b|broke up\b|"
                    r"(?:got |is |was )?divorced\b)|^'s (?:girlfriend|boyfriend|wife|husband|"
                    r"partner|fianc\w+) (?:is|was)\b"),
    ))


# A statement that says something stopped or changed: with the embedder's nearest current
# fact of the same person, it replaces that fact ("Sam switched to tea" ends "Sam drinks
# coffee every morning").
CHANGE = re.compile(r"\b(?:switched|switching|changed|stopped|quit|no longer|not \w+ any ?more|"
                    r"anymore|gave up|instead of|now (?:prefers?|drinks?|eats?|uses?|plays?))\b",
                    re.IGNORECASE)


def about(statement: str, subject: str) -> str | None:
    """What a statement told of `subject` by name says they have one of at a time, if
    anything: "Sam moved to Porto" -> "home"."""
    if not statement.startswith(subject):
        return None
    rest = statement[len(subject):]
    if rest.startswith(" "):
        words = rest.split(" ")[1:]
        while words and speech.adverb(words[0]):
            words = words[1:]  # "Sam just moved", "Sam finally got"
        rest = " ".join(words)
    for name, pattern in ABOUT:
        if pattern.search(rest):
            return name
    return None


_ABSOLUTE = re.compile(r"\((?:[A-Z][a-z]+day )?(\d{1,2}) ([A-Z][a-z]+) (\d{4})\)")
MONTHS = ("January February March April May June July August September October November "
           "December").split()


def became_true(statement: str, said: date | None) -> str | None:
    """The first day-precise date a statement resolves to, else the day it was said."""
    m = _ABSOLUTE.search(statement)
    if m and m.group(2) in MONTHS:
        try:
            return date(int(m.group(3)), MONTHS.index(m.group(2)) + 1,
                        int(m.group(1))).isoformat()
        except ValueError:
            pass  # "(31 February 1990)", as someone typed it: not a day
    return said.isoformat() if said else None


_NAME_WORD = re.compile(r"\b[A-Z][a-zà-ÿ]+\b")
_PLACE_BEFORE = re.compile(r"\b(?:in|at|to|from|near|into|around|of|for|visit\w*)\s+$",
                           re.IGNORECASE)
# "the Japanese boy", "an Irish studio": a capitalized word after an article describes.
_ARTICLE_BEFORE = re.compile(r"\b(?:the|an?)\s+$", re.IGNORECASE)


def people_named(text: str, known: tuple[str, ...]) -> list[str]:
    """The people `text` names, in order, as far as words show it: a capitalized word
    inside a sentence that does not follow a place word ("from Manchester"), or one
    opening a sentence as its subject ("Ana says ..."); not the `known` speakers, not
    calendar words (nor their plurals, "on Thursdays") or common words, not one after
    "the" or "a" ("the Japanese boy")."""
    found = []
    for sentence in speech.sentences(text):
        for m in _NAME_WORD.finditer(sentence):
            word = m.group()
            if word in known or word.lower() in STOPWORDS \
                    or word.lower().removesuffix("s") in CALENDAR or word.endswith("ing"):
                continue
            if m.start() == 0:
                if not speech.opens_with_name(sentence):
                    continue
            elif _PLACE_BEFORE.search(sentence[:m.start()]) or \
                    _ARTICLE_BEFORE.search(sentence[:m.start()]) or \
                    sentence[m.start() - 2:m.start()] in (". ", "! ", "? "):
                continue
            found.append(word)
    return found


# "she"/"he" and "him" stand for a person; "his" is theirs; "her" is theirs before a word
# that names or describes a thing ("her time", "her new job") and the person elsewhere
# ("showing her Lyon", "saw her yesterday", "with her.").
_PRONOUNS = re.compile(r"\b(?:(?P<subject>[Ss]he|[Hh]e)(?P<is>['’]s)?|(?P<object>him)|"
                       r"(?P<owner>his)(?=\s+[a-z])|(?P<her>her))\b")


# Someone the sentence itself names before a pronoun: "my mum", "our son", "Kofi".
_ANTECEDENT = re.compile(r"\b(?:[Mm]y|[Oo]ur|[Hh]is|[Hh]er|[Tt]heir) [a-z]+|"
                         r"(?<!^)(?<![.!?] )\b[A-Z][a-zà-ÿ]+")


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
        if _ANTECEDENT.search(tidy[:m.start()]):
            return m.group()  # "my aunt sold her boat": hers, named in the sentence
        after = re.findall(r"[A-Za-z]+", tidy[m.end():])[:1]
        if m.group("is"):  # "she's been" is "she has been"; "she's tall", "she is tall"
            return f"{name} has" if after and speech.past_participle(after[0]) else f"{name} is"
        if m.group("her"):
            owned = after and tidy[m.end():m.end() + 1] == " " and after[0].islower() \
                and after[0] not in STOPWORDS \
                and (speech.thing_word(after[0]) or speech.describing(after[0]))
            return f"{name}'s" if owned else name
        return f"{name}'s" if m.group("owner") else name
    return _PRONOUNS.sub(named_as, tidy)


_PERSONAL = frozenset(("I", "you", "we", "he", "she", "it", "they"))


def _inverted(words: list[str]) -> bool:
    """Whether a sentence opens with an auxiliary before its subject, as a question does
    without its question mark ("Can we talk about my trip", "Did you see my post"): not
    a statement that left out its "I"."""
    if len(words) < 2 or not speech.auxiliary(words[0]):
        return False
    return (words[1] if words[1] == "I" else words[1].lower()) in _PERSONAL


# Verbs that tell a sentence's time: it has a subject of its own somewhere.
_TELLING = frozenset("is are am was were has have had do does did".split())


def _doing(words: list[str]) -> bool:
    """Whether a sentence opens (past an adverb or two) with what someone is doing, a
    verb's -ing form before a function word or an adverb ("working on", "following
    my", "working late"; not "evening runs", where a noun follows), and no verb tells
    its time."""
    i = 0
    while i < len(words) and (words[i].lower() in speech.ADVERBS_BEFORE_A_VERB
                              or speech.adverb(words[i])):  # "Still working on it"
        i += 1
    if i + 1 >= len(words):
        return False
    first, after = words[i].lower(), words[i + 1]
    rest = words[i + 1:]
    # A verb's -s form after "the", "my"... is a plural noun ("the results").
    telling = [w.lower() in _TELLING or (speech.finite(w) and not (
        j and rest[j - 1].lower() in speech.DETERMINERS)) for j, w in enumerate(rest)]
    return first.endswith("ing") and "VERB" in speech.senses(first) \
        and (after.lower() in STOPWORDS or speech.adverb(after)) and not any(telling)


def _told(sentence: str, speaker: str, addressee: str | None, said: date | None,
          before: str = "", known: tuple[str, ...] = ()) -> str:
    """A sentence told about its speaker: in the third person where that reads right, the
    speaker quoted where it would not; relative dates made absolute. `before`, the turn's
    sentence before it: a sentence without a subject ("Slipped on the ice") goes on
    about whoever that one was about, the speaker only when it was the speaker."""
    text = resolve(sentence, said) if said else sentence
    words = _WORD.findall(text)
    if _inverted(words):  # a question without its mark: retold, its verbs would be guesses
        return speech.quoted(text, speaker)
    own = not before or bool(_OWN_SUBJECT.search(before)) or not (
        _OTHER_SUBJECT.search(before) or people_named(before, known))
    if (own and len(words) > 1 and text.startswith(f"{words[0]} ")
            and speech.past_verb(words[0]) and words[1] not in ("and", "or")
            and not speech.opens_with_name(text)):
        # "Started at the bakery on Monday": the speaker's own news ("Exhausted and
        # embarrassed", "Scared." describe, and tell none).
        text = f"I {text[:1].lower()}{text[1:]}"
    elif own and words[:1] == ["Been"] and words[1:2] not in (["a"], ["an"]):
        # "Been running longer since we talked"; not "Been a long week", whose subject
        # may be "it".
        text = f"I have {text[:1].lower()}{text[1:]}"
    elif own and len(words) > 2 and (words[0], words[1]) != ("Gonna", "be") \
            and words[:3] != ["Going", "to", "be"] \
            and (words[0] == "Gonna" or words[:2] == ["Going", "to"]):
        # "Gonna take the bus", "Going to try the new gym": the speaker's own plan (it
        # was told as "Gonna continue Sam's course", a verb without its subject); not
        # "Gonna be a long week", whose subject is "it".
        rest = text[len(words[0]):].lstrip()
        rest = rest[len("to "):] if words[0] == "Going" else rest
        text = f"I'm going to {rest}"
    elif own and _doing(words):
        # "Still working on my biz": what the speaker is doing (no verb of its own tells
        # it); not "Seeing the sea again made my week", nor "Evening runs by the river".
        text = f"I'm {text[:1].lower()}{text[1:]}"
    elif own and len(words) > 1 and speech.base_verb(words[0]) \
            and not speech.describing(words[0]) and not speech.subject_next(words[1]) \
            and re.search(r"\b[Mm]y\b", text) and not _ADDRESS.match(text):
        # "Love my new job"; not "Last Fri my kids ...", whose first word also describes,
        # nor "Dance is my stress fix", whose first word a verb follows.
        text = f"I {text[:1].lower()}{text[1:]}"
    third = speech.in_third_person(text, speaker, addressee)
    if third is not None and speaker in third:
        return third  # "Sam adopted a dog"
    return speech.quoted(text, speaker)  # `Sam: "Ana moved to Porto in May."`


def extract(speaker: str, content: str, said_at: str, addressee: str | None,
            previous: str = "", replying: bool = True) -> list[Candidate]:
    """The facts one turn may hold, in the third person: `speaker` is the person's name;
    `previous`, the turn before, names whom a "she" or "he" may mean, and, said by
    someone else (`replying`), whose news a reply's subject-less opening may be about.
    What is proposed here is structure only; which proposals are kept is the selector's
    to say."""
    said = day_of(said_at)
    out: list[Candidate] = []
    told: list[str] = []  # this turn's sentences so far
    known = (speaker, addressee) if addressee else (speaker,)
    for sentence in speech.sentences(content):
        told.append(sentence)
        plain = bare(speech.capitalized(sentence), known)
        if not proposed(plain):
            continue
        # Whom a "she" may mean: the turn before and this turn's last few sentences.
        tidy = resolve_people(plain, " ".join([previous, *told[-8:-1]]), known) \
            if _PRONOUNS.search(plain) else plain
        named_other = tidy != plain  # "She ..." became "Ana ...", "her" "Ana"
        before = speech.capitalized(told[-2]) if len(told) > 1 else ""
        if not before and people_named(previous, known):  # "How did Biscuit take it?"
            before = previous
        if replying and len(told) == 1 and _echoes(plain, previous):
            continue  # "Started a new job, huge!" after "I started a new job": theirs
        statement = _told(tidy, speaker, addressee, said, before, known)
        if len(statement) > MAX_CHARS:
            continue  # rewritten past a sentence's length: not cut mid-word
        statement = _without_own_name(statement, speaker)
        if not _WORD.search(statement):
            continue  # "I'm Sam": the name the speaker already goes by
        if statement.startswith(f'{speaker}: "') and len(_WORD.findall(tidy)) < 6 \
                and not (PROPER.search(tidy) or NUMBER.search(tidy)
                         or _FIRST_PERSON.search(tidy)):
            continue  # a short fragment about no one ("It took all day"): hardly a memory
        # What the speaker has one of at a time (a job, a home) only from their own news,
        # told by name ("Sam moved to Porto"), not quoted or about someone else.
        someone_else = named_other or not statement.startswith((f"{speaker} ",
                                                                 f"{speaker}'s "))
        out.append(Candidate(speaker, statement,
                             None if someone_else else about(statement, speaker),
                             became_true(statement, said), said_at))
    return out


def _echoes(sentence: str, previous: str) -> bool:
    """Whether a sentence without a subject opens on a verb the turn before used ("Started
    a new job, that is huge!" after "I started a new job"): a reply about the other's
    news, not the speaker's own."""
    words = _WORD.findall(sentence)
    if len(words) < 2 or not previous or speech.subject_next(words[1]) \
            or words[0].lower() in STOPWORDS:
        return False
    verbs = set(speech.verb_lemmas(words[0]))
    if not verbs:
        return False
    said = _WORD.findall(previous)  # the other's own news: the verb after their "I"/"we"
    return any(verbs & set(speech.verb_lemmas(w)) and _FIRST_PERSON.search(
        " ".join(said[max(0, i - 5):i])) for i, w in enumerate(said))  # "we are hoping to"


def _without_own_name(statement: str, speaker: str) -> str:
    """A statement without the clause that gives the speaker's own name ("Sam is Sam, Sam
    has just moved in upstairs" -> "Sam has just moved in upstairs"): memory knows whose
    words they are."""
    name = re.escape(speaker)
    text = re.sub(rf"(^|,\s+){name} is {name}(?:,\s+(?:and\s+)?|\W*$)",
                  lambda m: m[1], statement)
    text = re.sub(r",\s*$", ".", text.strip())
    return text[:1].upper() + text[1:] if text != statement else statement


@functools.lru_cache(maxsize=16384)
def extracted(speaker: str, content: str, said_at: str, addressee: str | None,
              previous: str = "", replying: bool = True) -> tuple[Candidate, ...]:
    """extract(), remembered: the facts job and an offline gist read the same turns in one
    pass, and reading a turn costs more than anything else either does with it."""
    return tuple(extract(speaker, content, said_at, addressee, previous, replying))

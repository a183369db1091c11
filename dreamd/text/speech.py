"""What a sentence is, as far as its words show: said to someone, asked, told, or called
out; and the same sentence told about its speaker in the third person. Also the
words that carry little meaning on their own, shared by selection and lexical recall.

General English only: the verb forms come from lemminflect's dictionary of English
(base form, third person, past, past participle), not from any conversation's words.
Where rewriting would break a sentence ("I read it" — read now, or read then?), the
speaker is quoted instead: correct beats clever.
"""

from __future__ import annotations

import functools
import re

from lemminflect import getAllLemmas, getInflection

from dreamd.text.lexicon import tables

# Function words: never worth matching on.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most much must my myself nor not of off on once only
    or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under
    until us very was we were what when where which while who whom why will with would you
    your yours yourself yourselves that's it's i'm don't can't you're i've i'll didn't
    doesn't isn't""".split()
)

# Words too common in chat to name a topic (used when picking keywords, not in recall:
# "week" or "last" matter to a temporal question).
CHATTER = STOPWORDS | frozenset(
    """yes yeah okay sure really thanks thank like know think going get got one let lot well
    want maybe still something things thing make sounds good great user assistant today
    first last next week weeks time day days tonight morning year years back even never
    always every""".split()
)

# What greets, thanks or reacts when it opens a sentence: general English, never a name,
# a topic or a gist's news ("Hi Auntie Margaret!", "Aw thanks").
INTERJECTIONS = frozenset("""hi hey heya hiya hello howdy yo greetings thanks thank thx
    congrats congratulations cheers bye goodbye wow whoa woah omg haha hahaha hehe lol lmao
    aw aww awww yay ooh oops yikes phew ugh oh ah hmm um uh yep yup yeah nope nah""".split())

# Day and month names: words that date something, never what it is about.
CALENDAR = frozenset("""monday tuesday wednesday thursday friday saturday sunday january
    february march april may june july august september october november december""".split())

# Said but not words: "[shares an image: a dog on a beach]" and other stage directions.
_STAGE = re.compile(r"\s*\[[^\]]*\]")
# A sentence ends at . ! or ? before a capital ("great!Haha" too) or a quotation opened
# after a space, or before any word where people write in lower case ("got home late.
# dinner was cold"); a quotation mark right after the stop closes the sentence's own
# quotation ('a "highly commended." Not bad'), and the sentence ends after it.
_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'“])|(?<=[.!?])(?=[A-Z“])|"
                  r"(?<=[.!?][\"'”’])\s+(?=[A-Z\"'“])|(?<=[.!?])\s+(?=[a-z0-9])")
# ... but not after a title, an initial or a common abbreviation ("Dr. Okafor", "J. R.",
# "the U.S. team", "St. Ives").
_ABBREVIATED = re.compile(r"(?:^|\s)(?:[A-Za-z]|Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Mt|vs|etc|approx|"
                          r"(?:[A-Za-z]\.)+[A-Za-z])\.$")
_LOWER_I = ((re.compile(r"\bi\b"), "I"), (re.compile(r"\b[iI]m\b"), "I'm"),
            (re.compile(r"\b[iI]ve\b"), "I've"), (re.compile(r"\bi(?=['’](?:m|ve|ll|d)\b)"), "I"),
            # "i cant", "we dont": a negation after its subject, its apostrophe left out
            (re.compile(r"\b((?:[Ii]|[Yy]ou|[Ww]e|[Tt]hey|[Hh]e|[Ss]he|[Ii]t)\s+(?:really\s+|just\s+"
                        r"|still\s+)?(?:ca|do|did|wo|does|is|was|are|were|have|has|had|could|"
                        r"would|should))nt\b"), r"\1n't"))
WORD = re.compile(r"[\w'’]+")


def lemmas(word: str) -> dict[str, tuple[str, ...]]:
    """Each part of speech English knows `word` as, with its lemmas (getAllLemmas)."""
    tables()
    return dict(getAllLemmas(word))


@functools.lru_cache(maxsize=16384)
def inflection(lemma: str, tag: str) -> tuple[str, ...] | None:
    """The spellings of `lemma` for a Penn tag ("VBD", "VBN", "VBZ"), as getInflection
    (which copies its whole table entry each call: remembered)."""
    tables()
    found = getInflection(lemma, tag)
    return tuple(found) if found else None


def unstaged(text: str) -> str:
    """`text` without its stage directions."""
    return _STAGE.sub("", text)


def sentences(text: str) -> list[str]:
    """The sentences of a turn, stage directions left out."""
    text = unstaged(text.replace("\n", " "))
    out: list[str] = []
    at = 0
    for m in _END.finditer(text):
        # The last word before the end is all an abbreviation needs (and a long turn is
        # not copied once for each of its sentences).
        last = " " + text[max(0, m.start() - 24):m.start()].rsplit(" ", 1)[-1]
        if not _ABBREVIATED.search(last):
            out.append(text[at:m.start()])
            at = m.end()
    out.append(text[at:])
    return [s.strip() for s in out if s.strip()]


def capitalized(sentence: str) -> str:
    """A sentence as written by someone who uses capitals: "im in a band, i play bass" ->
    "I'm in a band, I play bass"; the first letter up."""
    for pattern, replacement in _LOWER_I:
        sentence = pattern.sub(replacement, sentence)
    return sentence[:1].upper() + sentence[1:]


@functools.lru_cache(maxsize=65536)
def _senses(word: str) -> dict[str, tuple[str, ...]]:
    """The parts of speech English knows a lower-case word as, each with its lemmas."""
    return lemmas(word)


def senses(word: str) -> frozenset[str]:
    """The parts of speech English knows a lower-case word as: "NOUN", "VERB", "ADJ"..."""
    return frozenset(_senses(word))


def _verb_lemmas(word: str) -> tuple[str, ...]:
    found = _senses(word)
    return found.get("VERB", ()) + found.get("AUX", ())


def verb_lemmas(word: str) -> tuple[str, ...]:
    """The verbs a word is a form of ("started" -> "start"; "moving" -> "move")."""
    return _verb_lemmas(word.lower())


def base_verb(word: str) -> bool:
    """Whether `word` is a verb's base form ("take", "hope"), as an order or a wish opens."""
    return word.lower() in _verb_lemmas(word.lower())


def auxiliary(word: str) -> bool:
    """Whether English knows a word as an auxiliary or modal verb: "can", "did", "would"."""
    return "AUX" in _senses(word.lower())


def thing_word(word: str) -> bool:
    """Whether a lower-case word is a noun and nothing like a describing word: "band",
    "dog"; not "haha" (no word English knows), "lovely", "cool" or "best"."""
    found = _senses(word)
    return "NOUN" in found and not {"ADJ", "ADV"} & set(found)


def describing(word: str) -> bool:
    """Whether English knows a word as an adjective: "excited", "glad", "thrilled"."""
    return "ADJ" in _senses(word.lower())


def adverb(word: str) -> bool:
    """Whether English knows a word as an adverb and not as a verb ("really", "finally";
    not "fly" or "apply")."""
    found = _senses(word.lower())
    return "ADV" in found and "VERB" not in found


def could_name(word: str) -> bool:
    """Whether a word, capitalized inside a sentence, may be a name: one English does not
    know ("Ana"), knows as a noun ("Biscuit", "Rose") or only as a verb ("Rob", "Sue");
    not one it knows as a describing word ("Awesome", "Definitely")."""
    found = _senses(word.lower())
    return not found or "NOUN" in found or not {"ADJ", "ADV"} & set(found)


def told_verb(word: str) -> bool:
    """Whether `word` is a verb as a subject's own is: "says", "moved", "will"."""
    low = word.lower()
    if low in _SAME_AFTER_ANYONE:
        return True
    verbs = _verb_lemmas(low)
    return bool(verbs) and low not in verbs and not low.endswith("ing")


def past_verb(word: str) -> bool:
    """Whether `word` is a verb's simple past ("went", "moved"), as a subject-less
    sentence of one's own news opens ("Started at the bakery on Monday")."""
    low = word.lower()
    return any(low in (inflection(v, "VBD") or ()) and low != v for v in _verb_lemmas(low))


def past_participle(word: str) -> bool:
    """Whether `word` is a past participle that is no base form: "been", "forgotten",
    "moved"; not "need" or "read"."""
    low = word.lower()
    verbs = _verb_lemmas(low)
    return low not in verbs and any(low in (inflection(v, "VBN") or ()) for v in verbs)


# English's modal verbs, and the adverbs a verb follows ("I still go" -> "Sam still
# goes"): words after a subject that read the same after "I" and after "she".
MODALS = frozenset("will would can could should shall might must may".split())
ADVERBS_BEFORE_A_VERB = frozenset("just also still never always".split())
_SAME_AFTER_ANYONE = MODALS | ADVERBS_BEFORE_A_VERB
# What opens a noun phrase: "the", "my", "those", "every".
DETERMINERS = frozenset("the a an my your his her its our their this that these those some "
                        "any every each no".split())
# Words after a noun that make it a subject ("Rent has gone up"), not an order's object.
_SUBJECT_NEXT = frozenset("is was has had are were will can 's and or".split())
_I_SUBJECT = re.compile(r"\b(?:I|I['’](?:m|ve|ll|d))\b")


def ordered(sentence: str) -> bool:
    """Whether a sentence opens as an order, a wish or a greeting does: with a verb's base
    form and no subject ("Sleep well", "Hope the move goes fine", "Enjoy the concert");
    "Rent has gone up", "Mark and I moved" and "Love my new job" are not."""
    words = WORD.findall(sentence)
    if len(words) < 2 or not words[0][:1].isupper() or not base_verb(words[0]):
        return False
    if set(_senses(words[0].lower())) & {"ADJ", "ADV"}:
        return False  # "Last Christmas I ...", "Still ...": an adjective or adverb first
    if _I_SUBJECT.search(sentence) or re.search(r"\b[Mm]y\b", sentence):
        return False  # "Mark and I moved", "Love my new job": the speaker's own
    return not subject_next(words[1])


def subject_next(word: str) -> bool:
    """Whether `word` after a sentence's first word makes that word its subject: "Rent
    has ...", "Dance is ...", "Ana says ..."."""
    return word.lower() in _SUBJECT_NEXT or told_verb(word)


def said_to_the_other(sentence: str) -> bool:
    """Whether a sentence is about the one spoken to ("You must be proud", "Your dog ..."),
    and not, after a word to them, about the speaker ("You know, I quit smoking")."""
    first = WORD.findall(sentence)[:1]
    return bool(first) and first[0].lower() in {
        "you", "your", "you're", "you've", "you'll", "you'd", "yours", "u", "ur"} \
        and not _I_SUBJECT.search(sentence)


def opens_with_name(sentence: str, known: tuple[str, ...] = ()) -> bool:
    """Whether a sentence's first word is a name as its subject ("Kofi lands on Friday",
    "Leeds was lovely"): capitalized, no word of English's dictionary or calendar, and
    told by a verb after it; "Crumbs everywhere", "Lights out" and "Haha, yes" are
    not (a name that is also a word, "Rose", is known as a name only inside a sentence)."""
    words = WORD.findall(sentence)
    if len(words) < 2 or not words[0][:1].isupper() or not words[0][1:2].islower():
        return False
    first = words[0].lower()
    if words[0] in known:
        return True
    if re.sub(r"['’](?:s|re|ve|ll|d|m)$", "", first) in STOPWORDS:
        return False  # "She's", "He'll": a pronoun and its verb, not a name and its "'s"
    if first in STOPWORDS or first in CALENDAR or first in INTERJECTIONS or _senses(first):
        return False  # a word English knows ("Lights out", "Crumbs everywhere")
    rest = sentence[len(words[0]):]
    return rest[:1] == " " and told_verb(words[1])


_THIRD = {"am": "is", "are": "is", "were": "was", "was": "was", "have": "has", "do": "does",
          "be": "is"}
_THIRD |= {f"{verb}n{q}t": f"{third}n't" for verb, third in (
    ("do", "does"), ("have", "has"), ("are", "is"), ("were", "was")) for q in "'’"}
_WE = re.compile(r"\b(?:[Ww]e|us|[Oo]ur|[Oo]urs|[Ww]e['’](?:re|ve|ll|d))\b")
_THEM_ALL = re.compile(r"\byou (?:guys|all|two|both)\b|\by['’]all\b", re.IGNORECASE)
_QUOTES = re.compile("[\"“”]")
# A span in quotation marks: a title, a name, someone's words ("Becoming", "I miss you");
# not the inch marks of 5'10".
_QUOTED = re.compile("(?<![\\w'’])(?:\"[^\"]*\"|“[^“”]*”)(?!\\w)")
_STAND_IN = 0xE000  # private-use characters hold a quoted span's place while retelling
_PRIVATE = re.compile("[\ue000-\uf8ff]")


def third_verb(verb: str) -> str | None:
    """The form a verb takes after "she" where it followed "I": "guess" -> "guesses",
    "went" -> "went"; None where the word cannot tell ("read": now or then?)."""
    if verb in _THIRD:
        return _THIRD[verb]
    if verb.endswith(("n't", "n’t")):  # "can't", "didn't", "won't": the same after "she"
        return verb
    verbs = _verb_lemmas(verb)
    if not verbs:
        return None
    if verb not in verbs:  # a past form, "went", "got", "finished"
        return verb
    if any(verb in (inflection(v, "VBD") or ()) for v in verbs if v != verb):
        return verb  # "saw", "found", "left": the past of another verb, as said after "I"
    if verb in _SAME_AFTER_ANYONE:
        return verb
    past = inflection(verb, "VBD")
    if past and verb in past:  # "read", "put", "set": the same now and then
        return None
    third = inflection(verb, "VBZ")
    return third[0] if third else None


_NEXT_WORD = re.compile(r" ([A-Za-z]+(?:['’]t)?)(?![\w'’])")


# Verbs whose object is followed by a bare verb: "let you know", "made you laugh".
_BARE_AFTER = re.compile(r"\b(?:let|lets|make|makes|made|help|helps|helped|watch|watched|"
                         r"see|saw|hear|heard)\s+$", re.IGNORECASE)


def finite(word: str) -> bool:
    """Whether a word is a verb's past or -s form, or a modal: what follows a subject."""
    low = word.lower()
    if low in _SAME_AFTER_ANYONE or low in _THIRD.values():
        return True
    verbs = _verb_lemmas(low)
    return any(low != v and (low in (inflection(v, "VBD") or ()) or
                             low in (inflection(v, "VBZ") or ())) for v in verbs)


def _adverb_here(word: str, following: str) -> bool:
    """Whether a word after a subject is an adverb before its verb: one English knows only
    as an adverb ("really"), one of ADVERBS_BEFORE_A_VERB, or one it knows as an adverb
    too when a verb's past or -s form follows ("even got")."""
    low = word.lower()
    if (adverb(word) and low not in _verb_lemmas(low)) or low in ADVERBS_BEFORE_A_VERB:
        return True
    return "ADV" in _senses(low) and bool(following) and finite(following)


class _Unsure(Exception):
    """A verb whose form after "she" the words cannot tell."""


def _agreeing(text: str, subject: str, name: str, object_too: bool) -> str:
    """Each `subject` ("I", "you") in `text` as `name`, with the verb after it (past any
    adverbs, "I really love") made to agree. `object_too`: the word may be an object ("told
    you about"), and then a word after it that is no verb, or that English knows as an
    adverb too ("walk you home"), stays as it is."""
    out: list[str] = []
    at = 0
    for m in re.finditer(rf"\b{subject}\b", text):
        out.append(text[at:m.start()])
        if object_too and _BARE_AFTER.search(text[:m.start()]):
            out.append(name)  # "let you know": an object, and its verb stays bare
            at = m.end()
            continue
        rest = text[m.end():]
        words = list(_NEXT_WORD.finditer(rest))  # read only as far as the verb
        said = name
        taken = 0
        for i, w in enumerate(words):
            if w.start() != taken:
                break  # punctuation: no verb follows
            word = w.group(1)
            taken = w.end()
            following = words[i + 1].group(1) if i + 1 < len(words) \
                and words[i + 1].start() == taken else ""
            if _adverb_here(word, following):
                said += f" {word}"  # "I really love", "I even got" (not "evens")
                continue
            if object_too and "ADV" in _senses(word.lower()):
                said += f" {word}"  # "walk you home", "drive you back": an object's
                break
            third = third_verb(word)
            if third is None and (object_too and not _verb_lemmas(word)):
                said += f" {word}"
            elif third is None:
                raise _Unsure(word)
            else:
                said += f" {third}"
            break
        else:
            taken = 0
            said = name
        out.append(said)
        at = m.end() + taken
    out.append(text[at:])
    return "".join(out)


def _had_or_would(m: re.Match[str]) -> str:
    """ "I'd": "had" before a past participle ("I'd been", "I'd already finished") or
    "better", else "would" ("I'd love to")."""
    words = re.findall(r"[A-Za-z]+", m.string[m.end():])[:2]
    if words and adverb(words[0]):
        words = words[1:]
    return "had" if words and (past_participle(words[0]) or words[0] == "better") else "would"


def in_third_person(sentence: str, speaker: str, addressee: str | None) -> str | None:
    """`sentence` told about `speaker` by name ("I guess Mia is right" -> "Mia guesses
    ..."), or None where that cannot be done without guessing: a verb that reads as now and
    then, "we", or a second person that would need a name nobody gave."""
    # What is in quotation marks is kept as said ("My dad wrote "I miss you" on the card"
    # -> "Mia's dad wrote "I miss you" on the card"); the rest is retold.
    if _PRIVATE.search(sentence):
        return None  # characters that would be taken for a quoted span's stand-in
    spans = _QUOTED.findall(sentence)
    text = sentence
    for i, span in enumerate(spans):
        text = text.replace(span, chr(_STAND_IN + i), 1)
    if _WE.search(text) or _QUOTES.search(text) or _THEM_ALL.search(text):
        return None  # "we" and "you guys" are more than one; a quotation left open
    if _quoted_verb(text):
        return None  # 'I "love" my job': the verb in quotation marks stays as said
    retold = _retold(text, speaker, addressee)
    if retold is None:
        return None
    for i, span in enumerate(spans):
        retold = retold.replace(chr(_STAND_IN + i), span)
    return retold


def _quoted_verb(text: str) -> bool:
    """Whether a quoted span stands where "I" or "you" needs its verb (adverbs between)."""
    words = re.findall(r"[A-Za-z'’]+|[\ue000-\uf8ff]", text)
    for i, word in enumerate(words):
        if word in ("I", "you", "You"):
            after = i + 1
            while after < len(words) and adverb(words[after]):
                after += 1
            if after < len(words) and _PRIVATE.fullmatch(words[after]):
                return True
    return False


_REFLEXIVE = re.compile(r"\b(?:[Mm]yself|[Yy]ourself)\b")


# "I go out ... and count what grows": a second verb of the same "I", in the same clause,
# with nothing between to make it an infinitive ("to", a modal) and a word after it that
# follows a verb, not a noun ("and love theme").
_AND_VERB = re.compile(r"\bI ([a-z]+)([^,.;:!?\"“”]*?) and ([a-z]+) (\w+)")
_AFTER_A_VERB = DETERMINERS | frozenset("it them him me us what where how when why who all"
                                        .split())
_NOT_BETWEEN = re.compile(r"\b(?:to|I|and|or|but|that|which|who|when|because|if|so)\b")


def _and_i(m: re.Match[str]) -> str:
    """ "I go out and count what" -> "I go out and I count what": each verb has its "I"
    to agree with; else the match as it was."""
    verb, between, second, after = m.groups()
    if all(base_verb(v) and not auxiliary(v) and third_verb(v) not in (None, v)
           for v in (verb, second)) and not _NOT_BETWEEN.search(between) \
            and not any(auxiliary(w) or finite(w) for w in between.split()) \
            and after in _AFTER_A_VERB:  # "it helps me relax and increase": not "I"'s
        return f"I {verb}{between} and I {second} {after}"
    return m.group()


# "My sister and I", "Tom and I" opening a sentence or a clause: two, whose verb stays as
# it is ("... and Mia are going"), not one that agrees with "Mia".
_TWO_WITH_I = re.compile(r"(^|,\s+)((?:[Mm]y|[Oo]ur)\s+(?:[a-z-]+\s+){0,2}?[a-z-]+|"
                         r"[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)(\s+and\s+)I\b(?!['’])")


def _retold(sentence: str, speaker: str, addressee: str | None) -> str | None:
    """in_third_person's work on a sentence without quotation marks."""
    text = _TWO_WITH_I.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{speaker}", sentence)
    # "wanted to say thank you for ...": thanking you ("thank Leo", not "say thank Leo")
    text = re.sub(r"\b([Ss]ay|[Ss]aid) thank you\b",
                  lambda m: "thank you" if m[1].lower() == "say" else "thanked you", text)
    text = re.sub(r"\bI['’]d\b", lambda m: f"I {_had_or_would(m)}", text)
    text = _AND_VERB.sub(_and_i, text)
    for contracted, full in (("m", "am"), ("ve", "have"), ("ll", "will")):
        text = re.sub(rf"\bI['’]{contracted}\b", f"I {full}", text)
    try:
        text = _agreeing(text, "I", speaker, object_too=False)
    except _Unsure:
        return None
    if re.search(r"\bI\b", text):
        return None  # "I" where no verb follows it ("Alex and I")
    if _REFLEXIVE.search(text):
        return None  # "did it myself": "herself", "himself" or "themself" is a guess
    text = re.sub(r"\b[Mm]y\b(?![,!])|\b[Mm]ine\b", lambda _: f"{speaker}'s", text)
    text = re.sub(r"\b[Mm]e\b", lambda _: speaker, text)
    if re.search(r"\byou", text, re.IGNORECASE):
        if not addressee:
            return None
        text = re.sub(r"\b[Yy]ou['’](re|ve|ll|d)\b",
                      lambda m: f"you {dict(re='are', ve='have', ll='will', d='would')[m[1]]}",
                      text)
        text = re.sub(r"\b[Yy]our(?:s)?\b", lambda _: f"{addressee}'s", text)
        try:
            text = _agreeing(text, "[Yy]ou", addressee, object_too=True)
        except _Unsure:
            return None
    return text if text.startswith(speaker) else text[:1].upper() + text[1:]


def quoted(sentence: str, speaker: str) -> str:
    """The speaker's own words, as said: `Mia: "I've had them for 3 years."`."""
    return f'{speaker}: "{sentence}"'

"""Offline extraction on what it was not made from: a corpus of general sentences, a second
sample conversation of another person and style (tests/data/, written for the tests; no
word of them is in a rule or trains the selector), verb agreement, and names.

The selector learns from dreamd/data/fact_examples.txt alone; these files are its exam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamd.cli.demo import SampleSession, parse_samples, sample_sessions
from dreamd.dream.extractive import ExtractiveCompleter, topics
from dreamd.dream.prompts import summary_prompt
from dreamd.dream.selector import EXAMPLES, WEIGHTS, examples, learned, proposals
from dreamd.text.facts import bare, extract, people_named
from dreamd.text.speech import in_third_person
from tests.helpers import kept

DATA = Path(__file__).parent / "data"
SHIPPED = Path(__file__).parent.parent / "dreamd" / "data"
# The second exam is by a writer who saw neither the selector's examples nor the first
# exam. Its chit-chat: 14 of 179 stored (the selector learned from the first 1,688
# examples alone stored 26; from 2,482, 12); of what tells something, 164 of 174 kept.
EXAMS = ["sentences.txt", "sentences_unseen.txt"]
SAID = "2025-03-01T10:00:00+00:00"

# The six sentences the issue found dropped: each must be kept.
NAMED = ("I was happy to get a promotion to assistant manager!",
         "I'm so excited, we are adopting a child!",
         "Sad news, my dog passed away.",
         "I went camping with my family in the mountains last weekend.",
         "That was when I moved to Berlin in 2019.",
         "This year I started learning the guitar.")

# English interjections and greetings: never a name, a topic or an About word.
INTERJECTIONS = frozenset("""haha hahaha hehe lol lmao omg wow yay yep yup yeah yes nope
    nah ok okay oh ooh aww aw ugh hmm hey hi hello bye thanks thank congrats cheers cool
    awesome nice great wonderful definitely absolutely totally sure ah uh um oops phew
    whoa gosh damn shoot welcome sorry please""".split())


def corpus(name: str = "sentences.txt") -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    section = ""
    for line in (DATA / name).read_text("utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.strip() and not line.startswith("#"):
            sections.setdefault(section, []).append(line.strip())
    return sections


def shingles(sentence: str) -> set[tuple[str, ...]]:
    """A sentence's runs of six words (its words, if fewer), its opening call set aside;
    none for three words or fewer: any two writers share "that's adorable" or "lol same"."""
    words = tuple(re.findall(r"\w+", bare(sentence).lower()))
    return {words[i:i + 6] for i in range(max(1, len(words) - 5))} if len(words) > 3 else set()


@pytest.mark.parametrize("name", EXAMS)
def test_the_corpus_is_written_not_borrowed(name: str) -> None:
    """The exam is not the training set: no sentence of it shares a run of six words (or,
    shorter, all its words) with an example, once their opening calls are set aside; nor
    does the second writer's exam with the first."""
    sections = corpus(name)
    assert len(sections["keep"]) >= 90 and len(sections["drop"]) >= 90
    examples = (SHIPPED / EXAMPLES).read_text("utf-8")
    taught = set().union(*(shingles(line[2:]) for line in examples.splitlines()
                           if line[:2] in ("+ ", "- ")))
    if name != EXAMS[0]:
        first = corpus()
        taught |= set().union(*(shingles(s) for s in first["keep"] + first["drop"]))
    shared = [s for s in sections["keep"] + sections["drop"] if shingles(s) & taught]
    assert shared == []


def test_the_six_sentences_the_issue_found_dropped_are_kept(minilm: Any) -> None:
    for sentence in NAMED:
        assert kept(minilm, "Robin", sentence, "Kai", said_at=SAID), sentence


@pytest.mark.parametrize(("name", "most_lost"), [(EXAMS[0], 0.05), (EXAMS[1], 0.08)])
def test_general_sentences_that_tell_something_are_kept(minilm: Any, name: str,
                                                        most_lost: float) -> None:
    sentences = corpus(name)["keep"]
    lost = [s for s in sentences if not kept(minilm, "Robin", s, "Kai", said_at=SAID)]
    assert len(lost) <= len(sentences) * most_lost, lost


@pytest.mark.parametrize("name", EXAMS)
def test_chit_chat_is_dropped(minilm: Any, name: str) -> None:
    sentences = corpus(name)["drop"]
    stored = [s for s in sentences if kept(minilm, "Robin", s, "Kai", said_at=SAID)]
    assert len(stored) <= len(sentences) * 0.10, stored


@pytest.mark.parametrize(("said", "told"), [
    ("Love my new job at the bakery.", "Mia loves Mia's new job"),  # a verb opens it
    # A first word English also knows as a describing word is no verb of the speaker's
    # (each of these was "Mia lasts ...", "Mia closes ...", "Mia frees ...").
    ("Last Fri I finally took my kids to a pottery workshop.", "Last Fri (Friday"),
    ("Last summer I rented a cabin with my brothers.", "Last summer Mia rented"),
    ("Close to my flat they opened a climbing gym.", "Close to Mia's flat they opened"),
    ("Free weekends are rare since my promotion.", "Free weekends are rare since Mia's"),
    # A first word that a verb follows is the subject (it was "Mia dances is ...").
    ("Dance is my stress fix too.", "Dance is Mia's stress fix"),
    ("Cooking has been my escape this year.", "Cooking has been Mia's escape"),
])
def test_an_opening_word_that_also_describes_is_no_verb_of_the_speakers(said: str,
                                                                        told: str) -> None:
    from dreamd.text.facts import extract

    [fact] = extract("Mia", said, SAID, "Leo")
    assert fact.statement.startswith(told), fact.statement


@pytest.mark.parametrize(("said", "told"), [
    ("I guess she is doing a good job as a mom.", "Mia guesses she is doing a good job"),
    ("I hope you find one soon.", "Mia hopes Leo finds one soon."),
    ("I really love painting and I teach it on Sundays.",
     "Mia really loves painting and Mia teaches it on Sundays."),
    ("I don't eat meat anymore.", "Mia doesn't eat meat anymore."),
    ("I have two cats.", "Mia has two cats."),
    ("I'm a nurse and I've worked nights for years.",
     "Mia is a nurse and Mia has worked nights for years."),
    ("I went camping with my family.", "Mia went camping with Mia's family."),
    ("I saw a fox in my garden.", "Mia saw a fox in Mia's garden."),
    ("I study law and I watch birds.", "Mia studies law and Mia watches birds."),
    ("I told you about my sister.", "Mia told Leo about Mia's sister."),
    ("You were right, I can't sing.", "Leo was right, Mia can't sing."),
    # An object before a bare verb stays bare; an adverb that is also a verb is no verb.
    ("I wanted to let you know I joined a choir.", "Mia wanted to let Leo know Mia joined"),
    ("My jokes made you laugh.", "Mia's jokes made Leo laugh."),
    ("I even got a signed copy.", "Mia even got a signed copy."),
    ("I still go there on Fridays.", "Mia still goes there on Fridays."),
    ("I always walk to work.", "Mia always walks to work."),
    # A second verb of the same "I" agrees too; one after "to", a modal, or that names a
    # thing ("love theme"), stays as it is.
    ("I go out on the boat twice a month and count what grows back.",
     "Mia goes out on the boat twice a month and Mia counts what grows back."),
    ("I cook for my flatmates and walk the dog every morning.",
     "Mia cooks for Mia's flatmates and Mia walks the dog every morning."),
    ("I love the self-acceptance and love theme.", "Mia loves the self-acceptance and love "
     "theme."),
    ("I want to rest and read a book.", "Mia wants to rest and read a book."),
    ("I can cook and bake a cake.", "Mia can cook and bake a cake."),
    # Words in quotation marks are kept as said: a title, a name, someone's words.
    ('My favourite book is "Becoming" by Michelle Obama.',
     'Mia\'s favourite book is "Becoming" by Michelle Obama.'),
    ('"Brave" by Sara Bareilles means a lot to me.',
     '"Brave" by Sara Bareilles means a lot to Mia.'),
    ('My boss said "you are the best" and I cried.',
     'Mia\'s boss said "you are the best" and Mia cried.'),
    ("My dad wrote \u201cI miss you\u201d on the card.",
     "Mia's dad wrote \u201cI miss you\u201d on the card."),
    # "X and I" are two: their verb stays plural.
    ("My cousin and I are opening a bike shop in Lyon.",
     "Mia's cousin and Mia are opening a bike shop in Lyon."),
    ("Jonas and I have been climbing together since 2019.",
     "Jonas and Mia have been climbing together since 2019."),
    ("My dad and I were both born in Tema.", "Mia's dad and Mia were both born in Tema."),
    ("My grandma and I bake bread every Saturday.",
     "Mia's grandma and Mia bake bread every Saturday."),
    ("After the move, my partner and I adopted a greyhound.",
     "After the move, Mia's partner and Mia adopted a greyhound."),
    # ... and an "and I" that opens a clause of its own still agrees.
    ("I love the city and I am staying another year.",
     "Mia loves the city and Mia is staying another year."),
])
def test_rewritten_sentences_keep_their_verbs_in_agreement(said: str, told: str) -> None:
    assert (in_third_person(said, "Mia", "Leo") or "").startswith(told)


def test_the_reader_check_finds_two_people_told_with_one_s_verb() -> None:
    """bench.reader counts what the rewriting used to leave ("Mia's cousin and Mia is
    opening ..."), and not two clauses joined ("Tom left and Mia is staying")."""
    from bench.reader import agreement_breaks

    assert agreement_breaks("- Mia's cousin and Mia is opening a bike shop.") != []
    assert agreement_breaks("- Jonas and Mia has been climbing since 2019.") != []
    assert agreement_breaks("- Mia's grandma and Mia bakes bread every Saturday.") != []
    assert agreement_breaks("- Mia's cousin and Mia are opening a bike shop.") == []
    assert agreement_breaks("- Tom left early and the party was over.") == []
    assert agreement_breaks("- Kofi's brother marries in June and Mia has a speech.") == []
    assert agreement_breaks("- 4 May: It changed Mia's life and Mia has no regrets.") == []
    assert agreement_breaks("- 4 May: Mia's cousin and Mia is opening a shop.") != []


@pytest.mark.parametrize(("said", "told"), [
    ("Still working on my biz.", "Mia is still working on Mia's biz."),
    ("Working late again tonight at the depot.", "Mia is working late again tonight"),
    ("Still following my passion for dance.", "Mia is still following Mia's passion"),
])
def test_what_the_speaker_is_doing_without_its_subject_is_the_speakers(said: str,
                                                                      told: str) -> None:
    """"Still working on my biz" is the speaker's own doing (it was a line without a
    subject in the eras); "Seeing my kids happy was the best" has its subject."""
    [fact] = extract("Mia", said, SAID, "Leo")
    assert fact.statement.startswith(told), fact.statement
    [fact] = extract("Mia", "Seeing my kids happy was the best!", SAID, "Leo")
    assert fact.statement == "Seeing Mia's kids happy was the best!"


@pytest.mark.parametrize(("said", "told"), [
    ("Gonna repaint my kitchen this weekend.", "Mia is going to repaint Mia's kitchen"),
    ("Going to visit my aunt in Cork next month.", "Mia is going to visit Mia's aunt in Cork"),
])
def test_a_plan_without_its_subject_is_the_speakers(said: str, told: str) -> None:
    """"Gonna ..." and "Going to ..." without a subject are the speaker's own plan (told
    as "Gonna continue Mia's course" it was a verb without its subject, an agreement
    break in every tier that showed it)."""
    [fact] = extract("Mia", said, SAID, "Leo")
    assert fact.statement.startswith(told), fact.statement
    # Whose "gonna be" is is not said ("it"): no one is made the subject of a long week.
    assert not any(c.statement.startswith("Mia is going to be") for c in extract(
        "Mia", "Gonna be a long week at the depot.", SAID, "Leo"))


@pytest.mark.parametrize(("turn", "said"), [
    ('We won a bronze and a "highly commended." Not bad for beginners.',
     ['We won a bronze and a "highly commended."', "Not bad for beginners."]),
    ('She said "no way!" and left. Then I laughed.',
     ['She said "no way!" and left.', "Then I laughed."]),
    ("He called it “a triumph.” We laughed.", ["He called it “a triumph.”", "We laughed."]),
    ("I told him 'not today.' He sulked.", ["I told him 'not today.'", "He sulked."]),
    ('Best day ever!Haha. Then "Sam" called.', ["Best day ever!", "Haha.", 'Then "Sam" called.']),
])
def test_a_quotation_closed_after_its_full_stop_ends_with_its_sentence(turn: str,
                                                                       said: list[str]) -> None:
    """A closing quotation mark after a sentence's full stop is that sentence's, not the
    opening of the next (which made `Cormac: "" Not bad ...`)."""
    from dreamd.text.speech import sentences

    assert sentences(turn) == said


def test_so_far_is_no_joining_so() -> None:
    """"So far I can ..." opens on a phrase, not on a "so" joining it to the last sentence:
    nobody is called "Far"."""
    told = extract("Mia", "So far I can count to ten in Korean.", SAID, "Leo")
    assert told and all("Far " not in c.statement for c in told), told
    assert any("Mia can count to ten in Korean" in c.statement for c in told), told
    # A quantity stands without its "so".
    from dreamd.text.facts import bare

    assert bare("So many cousins came to the wedding in Lagos.") == \
        "Many cousins came to the wedding in Lagos."


@pytest.mark.parametrize("said", [
    "No, I haven't.", "Honestly, I didn't.", "We really did!", "Yes, we have, actually.",
    "I wasn't.", "She does too.", "I can't.",
])
def test_an_answer_ending_on_its_auxiliary_leaves_its_verb_to_the_question(said: str) -> None:
    """"No, I haven't." answers a question: what was or was not done is the question's, so
    it is nothing a friend could keep on its own (as "Maybe I should." is not)."""
    assert extract("Mia", said, SAID, "Leo") == []


@pytest.mark.parametrize(("said", "kept", "gone"), [
    ("I did, my uncle showed me how to tie flies for trout.",
     "Mia's uncle showed Mia how to tie flies for trout", "Mia did,"),
    ("We have, and the bees made forty jars of honey last summer.",
     "bees made forty jars of honey", "Mia have,"),
    ("I don't, but my brother Tomas keeps two ferrets.", "Tomas keeps two ferrets", "don't,"),
])
def test_an_answers_opening_clause_is_left_out_and_what_follows_kept(
        said: str, kept: str, gone: str) -> None:
    """"I did, my uncle showed me ..." opens on the answer to a question, then tells: the
    telling part is the fact, without the answer's clause."""
    told = extract("Mia", said, SAID, "Leo")
    assert any(kept in c.statement for c in told), told
    assert all(gone not in c.statement and not c.statement.startswith(("Mia did", "Mia have"))
               for c in told), told


def test_a_clause_the_comma_only_interrupts_is_no_answer() -> None:
    """"I have, over the years, collected ..." is one clause with an aside: kept whole."""
    told = extract("Mia", "I have, over the years, collected three hundred stamps from Peru.",
                   SAID, "Leo")
    assert any("collected three hundred stamps from Peru" in c.statement
               and c.statement.startswith("Mia has") for c in told), told


@pytest.mark.parametrize(("said", "told"), [
    ("omg my cousin just opened a ramen bar in lisbon", "Mia's cousin just opened a ramen bar"),
    ("yeah i switched to night shifts at the depot in march", "Mia switched to night shifts"),
    ("lol ok i adopted a second ferret, his name is Pickle", "Mia adopted a second ferret"),
])
def test_an_interjection_opening_a_lower_case_line_is_no_part_of_the_fact(
        said: str, told: str) -> None:
    """Written in lower case without a comma, "omg my cousin ..." still opens on an
    interjection: the fact starts after it (not "Omg Mia's cousin ...")."""
    statements = [c.statement for c in extract("Mia", said, SAID, "Leo")]
    assert any(s.startswith(told) for s in statements), statements


def test_a_line_that_is_an_order_after_its_interjection_is_no_fact() -> None:
    """"ok send me the link" is an order to the other, whatever opens it."""
    assert extract("Mia", "ok send me the link, same nickname as on discord", SAID, "Leo") == []
    # A thanks takes an object: what follows it is not a sentence of its own.
    told = extract("Mia", "thanks to my sister I finally passed the driving test", SAID, "Leo")
    assert all(not c.statement.startswith("To ") for c in told), told


@pytest.mark.parametrize(("said", "told"), [
    ("Ines, my sister, runs a bakery in Porto.", "Ines, Mia's sister, runs a bakery in Porto"),
    ("Tomas, our neighbour, keeps bees on the roof.", "Tomas"),
])
def test_a_name_followed_by_who_they_are_is_the_subject_not_a_call(said: str, told: str
                                                                     ) -> None:
    """"Ines, my sister, runs ..." names its subject and says who she is: not a call to
    someone called Ines ("Leo, my boss gave me a raise" is one, and loses it)."""
    statements = [c.statement for c in extract("Mia", said, SAID, "Leo")]
    assert any(told in s for s in statements), statements
    assert [c.statement for c in extract("Mia", "Leo, my boss gave me a raise.", SAID, "Leo")
            ] == ["Mia's boss gave Mia a raise."]


@pytest.mark.parametrize(("said", "told"), [
    ("Hello, I'm Mia, I've just moved into the flat below yours.",
     "Mia has just moved into the flat below"),
    ("Sorry to bother you, I'm Mia, I run the bakery on the corner.",
     "Sorry to bother Leo, Mia runs the bakery on the corner."),
    ("I'm Mia, and the one in the red boots is my son Jun.", "The one in the red boots is"),
])
def test_the_speaker_giving_her_own_name_is_no_part_of_the_fact(said: str, told: str
                                                                ) -> None:
    """"I'm Mia, I've just moved ..." told of Mia is not "Mia is Mia, Mia has just ...":
    memory knows whose words they are."""
    statements = [c.statement for c in extract("Mia", said, SAID, "Leo")]
    assert any(told in s for s in statements), statements
    assert not any("Mia is Mia" in s for s in statements), statements


@pytest.mark.parametrize("said", ["Kisses to Jun!", "Best wishes to Ana on her exam.",
                                  "Big hugs to Bruno and the twins x", "Good luck to Ana!"])
def test_a_wish_sent_on_to_someone_is_no_fact(said: str) -> None:
    """"Kisses to Jun!" passes a greeting on; it tells nothing of Jun or the speaker."""
    assert extract("Mia", said, SAID, "Leo") == []
    assert [c.statement for c in extract("Mia", "Love to cook for my friends on Sundays.",
                                         SAID, "Leo")] == \
        ["Mia loves to cook for Mia's friends on Sundays."]


def test_saying_thank_you_is_thanking() -> None:
    """"I wanted to say thank you for ..." told of Mia thanks Leo; "say thank Leo" reads
    wrong."""
    told = extract("Mia", "I just wanted to say thank you for feeding the cat.", SAID, "Leo")
    assert [c.statement for c in told] == ["Mia just wanted to thank Leo for feeding the cat."]


@pytest.mark.parametrize(("said", "before"), [
    ("Started a new job, that is huge!", "I started a new job at the bank on Monday."),
    ("Moving in the middle of exam season, brave.", "We're moving to Ghent in June."),
    ("Moving in the middle of exam season, brave.", "We are hoping to move to Ghent in June."),
])
def test_a_reply_without_its_subject_that_echoes_the_other_s_verb_is_about_them(
        said: str, before: str) -> None:
    """Opening a reply, a sentence without a subject whose verb the other just used of
    themselves ("Started a new job, that is huge!" after "I started a new job") is about
    the other's news, not the speaker's."""
    told = extract("Mia", said, SAID, "Leo", before)
    assert not any(c.statement.startswith("Mia ") for c in told), told
    # Without the echo, the speaker's own news, as before.
    told = extract("Mia", "Started at the bakery on Monday.", SAID, "Leo",
                   "What have you been up to?")
    assert [c.statement[:30] for c in told] == ["Mia started at the bakery on M"]
    # The speaker's own turn before, sent as two messages: still the speaker's news.
    told = extract("Mia", "Started at the bakery on Monday.", SAID, "Leo",
                   "I finally started a new job!", replying=False)
    assert [c.statement[:30] for c in told] == ["Mia started at the bakery on M"]
    # An answer to "did you ...?" is the speaker's own, whatever verb it echoes.
    told = extract("Mia", "Started at the bakery on Monday.", SAID, "Leo",
                   "Did you start the new job yet?")
    assert [c.statement[:30] for c in told] == ["Mia started at the bakery on M"]


def test_a_web_address_opening_a_line_is_no_verb() -> None:
    """"twitch.tv/..., on my nights off" gives an address, not a verb "twitch" whose
    subject the talk left out."""
    told = extract("Mia", "twitch.tv/mia_plays_dwarves, fridays on my nights off", SAID, "Leo")
    assert all("twitches" not in c.statement and not c.statement.startswith("Mia twitch")
               for c in told), told


@pytest.mark.parametrize(("said", "told"), [
    ("i cant even have gluten, coeliac since 2019", "Mia can't even have gluten"),
    ("we dont have a car so i cycle everywhere", "We don't have a car"),
    ("i didnt get the flat in leith", "Mia didn't get the flat in leith"),
])
def test_a_negation_written_without_its_apostrophe_is_read_as_one(said: str, told: str
                                                                   ) -> None:
    """In lower-case chat "i cant" is "I can't": told of Mia, "Mia can't", not "Mia cants"."""
    statements = [c.statement for c in extract("Mia", said, SAID, "Leo")]
    assert any(s.startswith(told) or told in s for s in statements), statements
    assert not any("cants" in s or "didnts" in s for s in statements), statements


def test_a_weekday_said_in_the_plural_is_no_one_a_pronoun_stands_for() -> None:
    """"on Thursdays" names a day, not a person "her" could be."""
    told = extract("Lena", "Bring your niece along on Thursdays. Bruno will show her the "
                   "greenhouse and the bees.", SAID, "Omar")
    assert all("Thursdays's" not in c.statement and "show Thursdays" not in c.statement
               for c in told), told


@pytest.mark.parametrize(("said", "told"), [
    ("I can walk you home after choir practice on Friday.", "Mia can walk Leo home after"),
    ("I'll drive you back to the station on Sunday.", "Mia will drive Leo back to"),
    ("I was thinking you love the sea, so I booked Brighton.", "Leo loves the sea"),
])
def test_a_you_before_home_or_back_is_an_object_and_home_no_verb(said: str,
                                                                 told: str) -> None:
    """"walk you home": "you" is the walk's object, and "home" no verb of Leo's
    ("Leo homes"); a "you" a verb of thinking leads into is still the subject."""
    assert any(told in c.statement for c in extract("Mia", said, SAID, "Leo")), said


def test_whose_been_a_something_is_is_not_said() -> None:
    """"Been a long week, but ..." may be "it" or "I": no one is made a long week."""
    told = extract("Mia", "Been a rough year, but I'm proud of how far I've come.", SAID,
                   "Leo")
    assert not any(c.statement.startswith("Mia has been a") for c in told), told
    [fact] = extract("Mia", "Been running longer since we talked.", SAID, "Leo")
    assert fact.statement.startswith('Mia: "I have been running'), fact.statement


@pytest.mark.parametrize(("said", "told"), [
    ("And I adopted a dog from the shelter last week.", "Mia adopted a dog"),
    ("So I signed up for the Porto half marathon.", "Mia signed up for"),
    ("Plus, my sister Ana is moving to Leeds in May.", "Mia's sister Ana is moving"),
    ("Oh, and I got the job at the bakery!", "Mia got the job"),
])
def test_a_statement_stands_without_the_word_that_joined_it_to_the_last(said: str,
                                                                       told: str) -> None:
    """A fact, and the offline gist's line told from it, reads on its own: not "And Mia
    ..." or `Mia: "So I ..."` (lines a reader counted among those that open with an
    interjection)."""
    facts = extract("Mia", said, SAID, "Leo")
    assert [c.statement for c in facts if c.statement.startswith(told)], facts


@pytest.mark.parametrize("said", [
    "I read it yesterday.",  # read now, or read then?
    "We are adopting a child.",  # "we" is more than the speaker
    'My boss said "you are the best and I cried.',  # a quotation left open
    'I am 5\'10" and my brother is 6\'2" tall.',  # inch marks, not a quotation
    'I really "love" my job.',  # the verb is in quotation marks
    "I felt proud of myself.",  # was "Mia felt proud of Mia."
    "I built the shed myself.",  # was "Mia built the shed Mia."
])
def test_where_rewriting_would_guess_the_speaker_is_quoted(said: str) -> None:
    assert in_third_person(said, "Mia", "Leo") is None
    [candidate] = extract("Mia", said, SAID, "Leo")
    assert candidate.statement.startswith('Mia: "')


@pytest.mark.parametrize(("said", "was"), [
    ("Can we talk about my sister tomorrow.", 'Mia: "I can we talk about my sister'),
    ("Did you see my new bike.", "Mia did Leo sees Mia's new bike."),
    ("Would you believe my sister got married.", "Mia would Leo believes Mia's sister"),
])
def test_a_question_without_its_mark_is_quoted_as_said(said: str, was: str) -> None:
    """An auxiliary before its subject opens a question, whatever the punctuation: no
    "I" is put before it and no verb is made to agree with a name (`was`: before)."""
    [candidate] = extract("Mia", said, SAID, "Leo")
    assert candidate.statement.startswith('Mia: "') and "Mia: \"I " not in candidate.statement
    assert candidate.statement.startswith(f'Mia: "{said.split()[0]} ')
    assert not candidate.statement.startswith(was)


def test_a_sentence_without_its_subject_goes_on_about_the_last_one_named() -> None:
    """"theo broke his wrist. fell off the trampoline": Theo fell, not the speaker."""
    statements = [c.statement for c in extract(
        "Jonah", "theo broke his wrist. fell off the trampoline at a party", SAID, "Kai")]
    assert not any(s.startswith("Jonah fell") for s in statements), statements
    own = extract("Jonah", "Moved into the new flat on Saturday.", SAID, "Kai", "How was it?")
    assert own[0].statement.startswith("Jonah moved into the new flat")


@pytest.mark.parametrize("said", [
    "Hi Auntie Margaret!",  # a greeting and names: a call, not a statement
    "Hello Dr Okafor and Professor Lind!",
    "Maybe I should.",  # a verb left for the talk to fill in: "should" what?
    "I wish I could.",
    "I'd love to.",  # and "to" with its verb left to the talk
    "I really want to!",
])
def test_a_call_or_a_sentence_that_leaves_its_verb_to_the_talk_is_no_fact(said: str) -> None:
    assert extract("Colm", said, SAID, "Margaret") == []
    # A month is no modal; a modal ending one clause of several leaves the rest a fact.
    assert extract("Colm", "I'm walking the Camino de Santiago in May.", SAID, "Margaret")
    assert extract("Colm", "I vote in every election, my grandmother marched so I could.",
                   SAID, "Margaret")


@pytest.mark.parametrize("said", [
    "I have news.",  # news announced, not told: what it is comes in the next sentence
    "Also, I've got some news too!",
    "We have big news as well.",
    "I've got exciting news to share!",
])
def test_news_announced_but_not_told_is_no_fact(said: str) -> None:
    assert extract("Ayo", said, SAID, "Lin") == []
    # News told in the same sentence is the speaker's.
    assert extract("Ayo", "I have news: I got the job at the observatory!", SAID, "Lin")
    assert extract("Ayo", "I have news about the flat, we got it.", SAID, "Lin")


def test_a_word_after_the_or_a_is_no_name() -> None:
    """"the Japanese boy", "an Irish studio": a word that describes what follows it, not
    a person a later "her" may be taken for (it was "Mia sends Japanese some sweets")."""
    assert people_named("She still remembers you, the Japanese boy from photos.",
                        ("Mia", "Leo")) == []
    assert people_named("They sent me to an Irish studio with Ana.", ("Mia",)) == ["Ana"]
    facts = extract("Mia", "I send her some sweets from Osaka maybe.", SAID, "Leo",
                    "She still remembers you, the Japanese boy from photos.")
    assert not any("Japanese" in c.statement for c in facts), facts


def test_interjections_and_greetings_are_never_names() -> None:
    text = ("Haha, yes! Wow. Yep I did it. Hey Leo! Thanks so much, Priya. Definitely going. "
            "Omg it was huge. Aww, Ana says hi. Cool, Tomás and I start on Monday.")
    assert set(people_named(text, ("Robin",))) <= {"Leo", "Priya", "Ana", "Tomás"}
    assert {"Leo", "Priya", "Tomás"} <= set(people_named(text, ("Robin",)))


def about_words(completer: ExtractiveCompleter, session: Any, people: tuple[str, ...]
                ) -> list[str]:
    lines = [f"{'Jonah' if role == 'user' else 'Kai'}: {text}" for role, text, _ in session.turns]
    prompt = dataclasses.replace(summary_prompt({"user": "Jonah", "agent": "Kai"}, None, lines, 5),
                                 context={"people": people})
    first = completer.complete(prompt).text.splitlines()[0]
    return [w.strip() for w in first.removeprefix("About: ").split(",")] \
        if first.startswith("About: ") else []


# A chat whose sentences keep opening with reactions, as many people write: the shape that
# made "Haha", "Wow" and "Yep" topics (they open more than one sentence each).
CHATTY = [
    ("user", "Hey Tariq! Haha, guess who finally signed up for the pottery studio on Elm "
             "Street."),
    ("assistant", "Wow, that's brilliant! Haha, what made you go for it?"),
    ("user", "Yep, my cousin Dalia dared me. Wow, the first class was messy. Haha, clay "
             "everywhere."),
    ("assistant", "Aww, that sounds like fun. Yep, messy is how it starts."),
    ("user", "Haha, true. Wow, Dalia made a perfect bowl though. Yep, she's a natural."),
    ("assistant", "Wow! Haha, does Dalia take the class with you every week?"),
    ("user", "Yep, every Thursday. Aww, and the teacher Ingrid lent me her old apron. "
             "[shares an image: a clay bowl on a wheel]"),
    ("assistant", "Haha, lovely. Wow, Ingrid sounds kind. Yep, keep me posted!"),
]


@pytest.mark.parametrize("sample", ["chatty", "second", "demo"])
def test_no_interjection_is_an_about_word_or_a_topic(minilm: Any, sample: str) -> None:
    if sample == "chatty":
        sessions = [SampleSession("c1", "Pottery", tuple(
            (role, text, "2025-01-09T18:00:00+00:00") for role, text in CHATTY))]
    else:
        sessions = (parse_samples((DATA / "second_sample.txt").read_text("utf-8"))
                    if sample == "second" else sample_sessions())
    completer = ExtractiveCompleter(minilm)
    words = []
    for session in sessions:
        words += about_words(completer, session, ("Jonah", "Sam", "Kai"))
        words += topics([text for _, text, _ in session.turns], 5)
    assert words, "no About line at all"
    spoken = [w for w in words if w.lower() in INTERJECTIONS or re.search(r"image|photo", w)]
    assert spoken == [], spoken
    if sample == "chatty":  # what it was about is still found
        assert {"Dalia", "Ingrid"} <= set(words), words


def test_a_word_only_capitalized_where_it_opens_a_sentence_is_no_topic() -> None:
    """"Keep it up!" said again and again is cheering, not what two people talked about
    (it was a self-state's topic); a name is written capitalized inside a sentence too."""
    lines = ["Gina: Keep it up! I walked Biscuit to the park today.",
             "Jon: Thanks! Keep going and keep at it, Biscuit says hi.",
             "Gina: Keep it up, you're almost there! How is Biscuit?"]
    found = topics(lines, 5)
    assert "Keep" not in found and "Biscuit" in found, found


def test_a_name_with_of_in_it_is_one_topic() -> None:
    """"the Isle of Skye", "the University of Leeds": one name, not two topics."""
    lines = ["Ana: We took the ferry to the Isle of Skye on Monday.",
             "Leo: Was the Isle of Skye cold? My cousin studies at the University of Leeds.",
             "Ana: Freezing. Next year, the University of Leeds for me too."]
    found = topics(lines, 5)
    assert {"Isle of Skye", "University of Leeds"} <= set(found), found
    assert not {"Isle", "Skye", "Leeds"} & set(found), found


def test_the_shipped_selector_was_learned_from_these_examples(minilm: Any) -> None:
    """The weights file names the examples it was learned from, as they are now, and
    holds a weight for each of the embedder's dimensions: examples edited without
    learning again fail here (learning it again is a soak test, below)."""
    text = (SHIPPED / EXAMPLES).read_text("utf-8")
    shipped = json.loads((SHIPPED / WEIGHTS).read_text("utf-8"))
    assert shipped["examples_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert shipped["examples"] == len(proposals(examples(text)))
    assert shipped["model"] == minilm.model
    assert len(shipped["weights"]) == minilm.embed(["a"]).shape[1]


@pytest.mark.soak  # embeds every example with the real model and fits 21 times: ~25 s
def test_the_shipped_selector_is_what_the_shipped_examples_teach(minilm: Any) -> None:
    """The weights file is reproducible from the examples (`python -m
    dreamd.dream.selector`): nothing in it came from anywhere else."""
    shipped = json.loads((SHIPPED / WEIGHTS).read_text("utf-8"))
    again = learned(minilm.model, minilm.embed, minilm.glance)
    assert again["examples_sha256"] == shipped["examples_sha256"]
    assert abs(float(str(again["threshold"])) - shipped["threshold"]) <= 0.02
    assert np.allclose(np.asarray(again["weights"]), shipped["weights"], atol=1e-3)
    assert abs(float(str(again["bias"])) - float(shipped["bias"])) < 1e-3
    glance, first = again["glance"], shipped["glance"]
    assert isinstance(glance, dict)
    assert abs(glance["floor"] - first["floor"]) <= 0.02
    assert np.allclose(np.asarray(glance["weights"]), first["weights"], atol=1e-3)

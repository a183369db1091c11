"""The offline Completer: picks what was said, chosen with the embedder.

A gist tells a session's turns as a friend's notes (dreamd.dream.gist); the other tasks
pick lines as given. It writes nothing of its own but connective labels and the third
person, so everything it returns can be traced to what the user and agent said.
Deterministic: same input, same output.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter, OrderedDict
from typing import Any

import numpy as np

from dreamd.backends.protocols import Embedder, Glancer
from dreamd.dream.gist import Told, has_words, readable, speaker_name, told_turns
from dreamd.dream.selector import for_model
from dreamd.models import Completion, Prompt
from dreamd.text.speech import (
    CALENDAR,
    CHATTER,
    INTERJECTIONS,
    could_name,
    opens_with_name,
    sentences,
    thing_word,
    unstaged,
)

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_CONTRACTED = re.compile(r"['’](?:s|d|ll|re|ve|m)$")  # "Gareth's", "She's": Gareth, she
_SELF_DISCLOSURE = re.compile(
    r"\b(i am|i'm|i was|i've|i have|i had|i work|i live|i moved|i love|i like|i hate|"
    r"i prefer|i want|i need|i feel|i think|my|me and|we're|we are|i'll|i will|i study|"
    r"i started|i got|i just)\b",
    re.IGNORECASE,
)
_POSITIVE = frozenset(
    """happy glad great good excited love loved lovely fun enjoy enjoyed proud grateful
    calm relaxed better wonderful amazing awesome nice hopeful thrilled relieved""".split()
)
_NEGATIVE = frozenset(
    """sad tired stressed anxious worried angry upset lonely bad awful terrible sick
    exhausted frustrated overwhelmed scared hurt afraid lost struggling difficult""".split()
)


_SPECIFIC = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+|\d+")


def informativeness(text: str) -> float:
    """How much a line is worth keeping: the speaker's own words, specifics, some length.

    Short acknowledgements and walls of text make poor memory lines; names, places and
    numbers make good ones; the user's turns say more about the user than the replies.
    """
    role, _, body = text.partition(": ")
    body = body or text
    words = len(_WORD.findall(body))
    if words < 3:
        return 0.2
    base = 0.4 if len(body) > 1200 else min(1.0, 0.5 + words / 30)
    specifics = len(_SPECIFIC.findall(body))
    speaker = 0.7 if role.strip().lower() == "assistant" else 1.0
    return base * speaker * (1 + 0.15 * min(4, specifics))


def select(vectors: np.ndarray, weights: np.ndarray, k: int, diversity: float = 0.3) -> list[int]:
    """Maximal marginal relevance around the centroid; ties go to the earlier item."""
    n = len(vectors)
    if n <= k:
        return list(range(n))
    centroid = vectors.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    relevance = (vectors @ (centroid / norm)) if norm > 0 else np.zeros(n, dtype=np.float32)
    relevance = relevance * weights
    chosen: list[int] = []
    best_sim = np.full(n, -1.0, dtype=np.float32)
    for _ in range(k):
        score = (1 - diversity) * relevance - diversity * np.maximum(best_sim, 0)
        score[chosen] = -np.inf
        pick = int(np.argmax(score))
        chosen.append(pick)
        best_sim = np.maximum(best_sim, vectors @ vectors[pick])
    return sorted(chosen)


def keywords(texts: list[str], n: int) -> list[str]:
    """The words most texts share, in the spelling they were written in most ("Biscuit",
    "Portuguese", "band"); only words said inside a sentence somewhere, not only at
    its start, where calls and reactions ("Haha", "Wow", "Definitely") stand, and, in
    lower case, only words English knows as the name of a thing ("band", not "haha",
    "lovely" or "nine") and that the texts use as one, after a determiner somewhere ("the
    band", "my runs"; not "sign up", "need" or "anything")."""
    counts: Counter[str] = Counter()
    spellings: dict[str, Counter[str]] = {}
    inside: set[str] = set()
    capitals: set[str] = set()  # words written capitalized inside a sentence
    named: set[str] = set()  # lower-case words said after a determiner
    for text in texts:
        words: set[str] = set()
        for sentence in sentences(text):
            found = [_CONTRACTED.sub("", w.strip("'-")) for w in _WORD.findall(sentence)]
            inside.update(w.lower() for w in found[1:])
            capitals.update(w.lower() for w in found[1:] if w[:1].isupper())
            words.update(found)
            named.update(m.group(1).lower() for m in _AFTER_DETERMINER.finditer(sentence))
        for word in words:
            key = word.lower()
            if key in CHATTER or not 3 < len(key) <= 30 or not (
                    thing_word(key) or (word[:1].isupper() and could_name(key))):
                continue
            spellings.setdefault(key, Counter())[word] += 1
        counts.update({w.lower() for w in words} & set(spellings))
    # A thing said after a determiner somewhere, or a name: capitalized inside a sentence
    # ("Keep it up!", however often, opens its sentences and names nothing).
    best = [w for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
            if c > 1 and w in inside and ((thing_word(w) and w in named) or w in capitals)
            ][:n]
    return [spellings[w].most_common(1)[0][0] for w in best]


_AFTER_DETERMINER = re.compile(
    r"\b(?:a|an|the|my|your|his|her|our|their|its|this|that|these|those|some|every|each|"
    r"no|\d+|two|three|four|five|several|many|new|old|first|last)\s+([a-z][a-z'-]{2,})\b",
    re.IGNORECASE)
ABOUT = "About: "
# A name may join its words with a particle: "Campo de Ourique", "Rio de Janeiro".
_NAME = re.compile(r"(?<!^)\b[A-Z][a-zà-ÿ]{2,}(?:[A-Z][a-zà-ÿ]+)*"
                   r"(?:\s(?:(?:de|da|do|dos|das|del|la|von|van|der|of)\s)?[A-Z][a-zà-ÿ]+)*")


def topics(lines: list[str], n: int, people: tuple[str, ...] = ()) -> list[str]:
    """What a conversation was about, in its own spelling: the names it mentions (people,
    places, things), the most mentioned first, then the words its lines keep coming back
    to. `lines` are "speaker: words"; the speakers and `people` (the user's and the
    agent's names, in every conversation of theirs) are not topics. A name is a
    capitalized word inside a sentence, or one opening it as its subject ("Kofi lands on
    Friday"); a word English knows that only ever opens sentences ("Haha", "Wow", "No",
    "Lights out") is none."""
    speakers = {line.partition(": ")[0].strip().lower() for line in lines}
    speakers |= {name.lower() for name in people}
    bodies = [unstaged(line.partition(": ")[2] or line) for line in lines]
    names: Counter[str] = Counter()
    for body in bodies:
        for sentence in sentences(body):
            first = sentence.split(" ", 1)[0]
            if opens_with_name(sentence) and not first.endswith(("ing", "ed")):
                names[first.strip(",;:!.")] += 1
            for name in _NAME.findall(sentence):
                names[name] += 1
    for name in list(names):  # "Gareth's" is Gareth; "He's", "She'd" are no one
        bare = _CONTRACTED.sub("", name)
        if bare != name:
            names[bare] += names.pop(name)
    for name in list(names):
        key = name.lower()
        if key in CHATTER or key in INTERJECTIONS or key.rstrip("s") in CALENDAR \
                or key in speakers \
                or not could_name(key):
            del names[name]
    chosen = [name for name, _ in sorted(names.items(), key=lambda nc: (-nc[1], nc[0]))]
    # Not a word of a longer name ("Ourique" where "Campo de Ourique" opened a sentence).
    chosen = [name for name in chosen
              if not any(name != other and name in other.split() for other in chosen)]
    taken = {w.lower() for name in chosen for w in name.split()}
    chosen += [w for w in keywords(bodies, n) if w.lower() not in taken
               and w.lower() not in speakers and w.lower() not in CALENDAR]
    return chosen[:n]


def mood(texts: list[str]) -> tuple[str, float]:
    """A lexicon reading of the recent user turns: (label, score in [-1, 1])."""
    pos = neg = 0
    for text in texts:
        for word in _WORD.findall(text.lower()):
            pos += word in _POSITIVE
            neg += word in _NEGATIVE
    if pos + neg == 0:
        return "neutral", 0.0
    score = (pos - neg) / (pos + neg)
    label = "warm" if score > 0.3 else "concerned" if score < -0.3 else "mixed"
    return label, round(score, 2)


class ExtractiveCompleter:
    """Answers every task by selection; `tokens_*` stay 0 because no LLM runs."""

    name = "extractive"

    def __init__(self, embedder: Embedder, cache_size: int = 20_000) -> None:
        self.embedder = embedder
        self.model = f"extractive+{embedder.model}"
        self.calls = 0
        # Line -> vector. Gist lines are turns kept verbatim, and eras, profile and the
        # narrative select among those same lines again: remembering their vectors saves
        # embedding them once per tier (bounded: ~1.5 KB a line at 384 dims).
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def complete(self, prompt: Prompt) -> Completion:
        self.calls += 1
        handler = getattr(self, f"_{prompt.task}", None)
        if handler is None:
            raise ValueError(f"extractive backend has no task {prompt.task!r}")
        text = handler(prompt)
        return Completion(text=text, backend=self.name, model=self.model, extractive=True)

    def _remember(self, text: str, vector: np.ndarray) -> None:
        self._cache[text] = vector
        self._cache.move_to_end(text)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _vectors(self, prompt: Prompt, items: list[str]) -> np.ndarray:
        if prompt.vectors is not None and len(prompt.vectors) == len(items):
            vectors = np.asarray(prompt.vectors, dtype=np.float32)
            for text, vector in zip(items, vectors, strict=True):
                self._remember(text, vector)
            return vectors
        # Held here: remembering the missing lines may evict lines of this same prompt.
        known = {t: self._cache[t] for t in items if t in self._cache}
        for text in known:
            self._cache.move_to_end(text)
        missing = [t for t in dict.fromkeys(items) if t not in known]
        if missing:
            for text, vector in zip(missing, self.embedder.embed(missing), strict=True):
                known[text] = vector
                self._remember(text, vector)
        return np.stack([known[t] for t in items])

    def _pick(self, prompt: Prompt, items: list[str], k: int) -> list[str]:
        if not items:
            return []
        vectors = self._vectors(prompt, items)
        weights = np.array([informativeness(t) for t in items], dtype=np.float32)
        return [items[i] for i in select(vectors, weights, k)]

    def _summarize(self, prompt: Prompt) -> str:
        """A line of what the session was about (the people, places and things it names),
        then what its turns said, told as a friend's notes (dreamd.dream.gist): the
        most telling turns, in the order said. A previous gist's lines stay candidates
        beside the new turns' (the incremental update), and its About words come first."""
        people = tuple(str(p) for p in prompt.context.get("people", ()))
        before = len(prompt.items) if prompt.task == "merge" else \
            int(prompt.context.get("previous", 0))
        kept = [t for t in prompt.items[:before] if not t.startswith(ABOUT)]
        new = list(prompt.items[before:])
        told = told_turns(new, list(prompt.context.get("said_at", ())), people)
        speakers = tuple(dict.fromkeys(speaker_name(t.partition(": ")[0], people)
                                       for t in new))
        about = list(dict.fromkeys(
            [w.strip() for t in prompt.items[:before] if t.startswith(ABOUT)
             for w in t[len(ABOUT):].split(",") if w.strip()]
            + topics(new, 6, people + speakers)))[:6]
        told, telling = self._telling_turns(told)
        lines = kept + [t.line for t in told]
        if not lines:  # nothing told: the session's own words, without stage directions
            lines = [readable(unstaged(t)) for t in new if has_words(unstaged(t))]
            lines = [t for t in lines if t]
            told = []
        if not lines:
            return ABOUT + ", ".join(about) if about else ""
        k = max(1, prompt.max_items - bool(about))
        aligned = prompt.vectors is not None and len(prompt.vectors) == len(prompt.items) \
            and not kept and told
        vectors = np.stack([np.asarray(prompt.vectors[before + t.turn], dtype=np.float32)
                            for t in told]) if aligned else \
            self._vectors(dataclasses.replace(prompt, vectors=None), lines)
        weights = np.concatenate([self._telling(kept), telling]) \
            if telling is not None and told else self._telling(lines)
        picked = select(vectors, weights, k)
        return "\n".join(([ABOUT + ", ".join(about)] if about else [])
                         + [lines[i] for i in picked])

    _merge = _summarize

    def _telling_turns(self, told: list[Told]) -> tuple[list[Told], np.ndarray | None]:
        """The turns not sure to be chit-chat, with how much each tells: each statement the
        facts selector would pass over at a glance is left out (a turn left with none, and
        no image, is no line), and a turn tells as much as its most telling statement.
        Without a glance here: every turn, and no weights."""
        selector = for_model(self.embedder.model)
        statements = list(dict.fromkeys(s for t in told for s in t.statements))
        if selector is None or selector.glance is None or not statements \
                or not isinstance(self.embedder, Glancer):
            return told, None
        chances = selector.glance.chances(self.embedder.glance(statements))
        chance = dict(zip(statements, chances, strict=True))
        floor = selector.glance.floor
        kept = [dataclasses.replace(t, statements=tuple(
                    s for s in t.statements if chance[s] >= floor)) for t in told]
        kept = [t for t in kept if t.statements or t.image]
        if not kept:
            return told, None
        return kept, np.array([0.2 + max((chance[s] for s in t.statements), default=0.0)
                               for t in kept], dtype=np.float32)

    def _telling(self, lines: list[str]) -> np.ndarray:
        """How much each gist line tells: the facts selector's first look at it, learned
        from the project's own examples, where there is one for this embedder; else by
        its words (informativeness)."""
        if not lines:
            return np.zeros(0, dtype=np.float32)
        selector = for_model(self.embedder.model)
        if selector is not None and selector.glance is not None \
                and isinstance(self.embedder, Glancer):
            chance = selector.glance.chances(self.embedder.glance(lines))
            return (0.2 + chance).astype(np.float32)
        return np.array([informativeness(t) for t in lines], dtype=np.float32)

    def _profile(self, prompt: Prompt) -> str:
        user_role = str(prompt.context.get("user_role", "user"))
        facts = [
            t for t in dict.fromkeys(prompt.items)
            if t.lower().startswith(f"{user_role}:") and _SELF_DISCLOSURE.search(t)
        ]
        chosen = self._pick(prompt, facts, prompt.max_items)
        return "\n".join(f"- {line.split(':', 1)[1].strip()}" for line in chosen)

    def _era(self, prompt: Prompt) -> str:
        return "\n".join(f"- {line}" for line in self._pick(prompt, list(prompt.items),
                                                              prompt.max_items))

    def _narrative(self, prompt: Prompt) -> str:
        # Items arrive as "YYYY-MM | line", oldest month first; lean towards the latest.
        items = list(prompt.items)
        chosen = self._pick(prompt, items[-max(prompt.max_items * 4, 1) :], prompt.max_items)
        return "\n".join(f"- {line}" for line in chosen)

    def _reflect(self, prompt: Prompt) -> str:
        ctx: dict[str, Any] = prompt.context
        turns = list(prompt.items)
        label, score = mood(turns)
        named = topics(turns, 5)  # the people and things it was about, as spelled
        new_turns = int(ctx.get("new_turns", 0))
        sessions = int(ctx.get("sessions", 0))
        user = str(ctx.get("user_name", "the user"))
        energy = round(min(1.0, 0.3 + new_turns / 200), 2)
        shown = named[:3]
        listed = ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else "".join(shown)
        about = f" about {listed}" if named else ""
        reflection = (
            f"{ctx.get('now', '')[:10]}: {new_turns} new turns with {user}"
            f"{', mostly' + about if about else ''}; "
            f"the tone read as {label}."
        )
        narrative = (
            f"I have talked with {user} across {sessions} sessions. "
            f"Lately we have been talking{about or ' about everyday things'}, "
            f"and the mood has felt {label}."
        )
        state = {
            "mood": label,
            "mood_score": score,
            "energy": energy,
            "self_narrative": narrative,
            "reflection": reflection,
            "topics": named,
        }
        return json.dumps(state, sort_keys=True)

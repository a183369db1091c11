"""What a friend of Sam's would remember from the shipped sample conversations
(dreamd/data/sample_conversations.txt), and what no profile should hold.

Written from the conversations, not from any output: each thing a friend would keep is
named with the conversation's own words for it, and a profile line counts as one of them
when it carries any of those words. Used by the facts tests and by `bench.quality demo`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The things a friend would keep, each with the words that carry it.
REMEMBER: dict[str, tuple[str, ...]] = {
    "lives in Lisbon, now in Campo de Ourique": ("Campo de Ourique", "Lisbon", "new flat"),
    "backend developer at a small logistics startup": ("backend developer", "logistics"),
    "tech lead of the routing team": ("tech lead", "accepted the offer"),
    "manages three other developers": ("three other developers",),
    "keeps Tuesday and Thursday mornings for coding": ("mornings for coding",),
    "manager Rui": ("manager Rui", "Rui wrote"),
    "dogs welcome at the office on Fridays": ("welcome on Fridays",),
    "sister Ana": ("sister Ana",),
    "Sam and Ana come from Manchester": ("Manchester",),
    "Ana is the faster runner (a 3:40 marathon, 1:41 half)": ("3 hours 40", "1:41"),
    "dog Biscuit, a terrier mix from the shelter": ("adopted a dog", "Biscuit", "terrier"),
    "took up running in July": ("first run", "5 km in 31"),
    "longest run 14 km": ("14 km",),
    "half marathon in 1 hour 57": ("1 hour 57",),
    "goal under two hours": ("under two hours",),
    "three runs a week, long runs on Sundays": ("three runs a week", "long run"),
    "stretches after runs": ("stretching",),
    "new running shoes, no knee pain": ("shoes", "knee"),
    "Seville marathon with Ana in February": ("Seville",),
    "evening Portuguese classes in Arroios": ("Arroios", "evening classes"),
    "passed the A2 exam, B1 in January": ("A2", "B1"),
    "was on call when the main database went down": ("database",),
    "shipped the new retry policy": ("retry policy",),
}

# The nine a profile must not miss.
CORE = ("lives in Lisbon, now in Campo de Ourique", "tech lead of the routing team",
        "sister Ana", "dog Biscuit, a terrier mix from the shelter",
        "half marathon in 1 hour 57", "Seville marathon with Ana in February",
        "passed the A2 exam, B1 in January",
        "backend developer at a small logistics startup", "manager Rui")

NEVER = ("maybe next time", "tired and want to unpack", "spend all day in meetings",
         "ask Rui if the company can help", "Tell me more", "Exhausted", "Only water",
         "pastéis de nata it is", "assistant:", "Wren:",
         # Lines that lean on the conversation around them ("it", "we", "each of them").
         "we both missed", "each of them")


@dataclass(frozen=True)
class Judged:
    found: tuple[str, ...]  # the things remembered
    lines: int  # the profile's fact lines
    kept: int  # of them, lines that carry something remembered
    wrong: tuple[str, ...]  # never-lines present

    @property
    def recall(self) -> float:
        return len(self.found) / len(REMEMBER)

    @property
    def precision(self) -> float:
        return self.kept / self.lines if self.lines else 0.0

    @property
    def core(self) -> int:
        return sum(name in self.found for name in CORE)

    def line(self, label: str) -> str:
        return (f"{label}: {self.lines} lines, precision {100 * self.precision:5.1f} "
                f"({self.kept}/{self.lines}), recall {100 * self.recall:5.1f} "
                f"({len(self.found)}/{len(REMEMBER)}; core {self.core}/{len(CORE)}), "
                f"never-lines {len(self.wrong)}")


def judged(text: str) -> Judged:
    """A profile (or any list of "- " lines) against the lists above."""
    lines = [ln for ln in text.splitlines() if ln.startswith("- ")]
    found = tuple(name for name, words in REMEMBER.items() if any(w in text for w in words))
    kept = sum(any(w in ln for words in REMEMBER.values() for w in words) for ln in lines)
    return Judged(found, len(lines), kept, tuple(ln for ln in NEVER if ln in text))

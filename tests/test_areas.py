"""Areas of a life by meaning: the shipped centroids are what the shipped examples make,
and facts none of the examples holds land where a reader would put them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from dreamd.dream.areas import CENTROIDS, EXAMPLES, MOMENT, for_model, made
from dreamd.dream.shown import profile_from
from dreamd.models import Fact

SHIPPED = Path(__file__).parent.parent / "dreamd" / "data"


def test_the_shipped_centroids_were_made_from_these_examples(minilm: Any) -> None:
    text = (SHIPPED / EXAMPLES).read_text("utf-8")
    shipped = json.loads((SHIPPED / CENTROIDS).read_text("utf-8"))
    assert shipped["examples_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert shipped["model"] == minilm.model
    again = made(minilm.model, minilm.embed)
    assert again["names"] == shipped["names"]


# Written for this test, in no example: a fact and the area a reader puts it under.
PLACED = [
    ("Nadia works as a night nurse at the children's hospital.", "Work"),
    ("Omar rents a studio flat near the station.", "Home"),
    ("Lucia and her husband Pablo are expecting twins in the spring.", "Family"),
    ("Ben plays tennis at the club every Sunday morning.", "Sport"),
    ("Hana has a tabby cat called Mochi.", "Pets"),
    ("Ines left her umbrella on the bus this afternoon.", MOMENT),
    ("Tom's asthma gets worse in the winter.", "Health"),
]


@pytest.mark.parametrize(("statement", "area"), PLACED)
def test_a_fact_is_placed_by_its_meaning(minilm: Any, statement: str, area: str) -> None:
    areas = for_model(minilm.model)
    assert areas is not None
    assert areas.of(minilm.embed([statement])) == [area]


def test_a_profile_starts_with_who_the_person_is_and_leaves_out_a_moment(minilm: Any
                                                                         ) -> None:
    said = "2026-05-02T10:00:00+00:00"
    statements = ["Ben plays tennis at the club every Sunday morning.",
                  "Ben coaches the junior tennis team on Saturdays.",
                  "Ben lives in a narrow house by the canal.",
                  "Ben works as a surveyor for the county.",
                  "Ben lost his glasses on the train this morning."]
    facts = [Fact(i + 1, "u", "Ben", None, s, None, said) for i, s in enumerate(statements)]
    areas = for_model(minilm.model)
    assert areas is not None
    placed = dict(zip([f.id for f in facts], areas.of(minilm.embed(statements)), strict=True))
    lines = profile_from(facts, 10, areas=placed).splitlines()
    assert lines[:2] == ["Work:", "- Ben works as a surveyor for the county."]
    assert lines[2:4] == ["Home:", "- Ben lives in a narrow house by the canal."]
    assert "Sport:" in lines and "glasses" not in "\n".join(lines)

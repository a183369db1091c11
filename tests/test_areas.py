"""A profile's areas by what a fact means, learned from dreamd/data/area_examples.txt.

The sentences below were written for these tests; none is in the examples file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from dreamd.backends.hashing import HashingEmbedder
from dreamd.backends.local import LocalEmbedder
from dreamd.dream import areas
from dreamd.models import Fact
from dreamd.text.from_facts import profile_from, topic

SHIPPED = Path(__file__).parent.parent / "dreamd" / "data"


@pytest.fixture(scope="module")
def minilm() -> LocalEmbedder:
    return LocalEmbedder()


def test_the_shipped_area_model_was_learned_from_these_examples(minilm: LocalEmbedder) -> None:
    """Examples edited without learning again fail here (learning again: soak, below)."""
    text = (SHIPPED / areas.EXAMPLES).read_text("utf-8")
    shipped = json.loads((SHIPPED / areas.WEIGHTS).read_text("utf-8"))
    assert shipped["examples_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert shipped["examples"] == len(areas.examples(text))
    assert shipped["model"] == minilm.model
    assert np.asarray(shipped["weights"]).shape == (minilm.embed(["a"]).shape[1],
                                                   len(shipped["areas"]))


@pytest.mark.soak  # embeds every example with the real model and fits six times
def test_the_shipped_area_model_is_what_the_examples_teach(minilm: LocalEmbedder) -> None:
    shipped = json.loads((SHIPPED / areas.WEIGHTS).read_text("utf-8"))
    again = areas.learned(minilm.model, minilm.embed)
    assert again["examples_sha256"] == shipped["examples_sha256"]
    assert again["areas"] == shipped["areas"]
    assert abs(float(str(again["floor"])) - shipped["floor"]) <= 0.02
    assert np.allclose(np.asarray(again["weights"]), shipped["weights"], atol=1e-3)


# What each says, and the area a reader files it under. Words alone file the first two
# under Home ("lives", "live").
MEANT = [
    ("Leila lives for her Saturday pottery class.", "Interests"),
    ("Kofi's band played live at the harbour festival.", "Interests"),
    ("Dana signed a lease on a two-room place by the canal.", "Home"),
    ("Kai adopted a three-legged tabby called Pip.", "Pets"),
    ("Mia's sister is expecting twins in June.", "Family"),
    ("Noor loves spicy ramen and makes her own chilli oil.", "Food and drink"),
    ("Yusuf flew to Lisbon for a long weekend.", "Travel"),
    ("Lena is learning German before her semester in Vienna.", "Learning"),
]


def test_a_fact_goes_under_the_area_it_means(minilm: LocalEmbedder) -> None:
    model = areas.for_model(minilm.model)
    assert model is not None
    vectors = dict(enumerate(minilm.embed([s for s, _ in MEANT])))
    found = model.of(vectors)
    assert {MEANT[i][0]: found.get(i) for i in vectors} == dict(MEANT)
    assert [topic(s) for s, _ in MEANT[:2]] == ["Home", "Home"]  # what words alone say


def test_another_embedders_vectors_have_no_area_model() -> None:
    assert areas.for_model(HashingEmbedder().model) is None


def fact(i: int, statement: str) -> Fact:
    return Fact(id=i, user_id="u", subject="Theo", statement=statement, about=None,
                valid_from=None, learned_at="2026-03-01T09:00:00+00:00")


def test_the_profile_files_a_fact_under_its_meaning_and_falls_back_on_words() -> None:
    facts = [fact(1, "Theo lives for the Saturday pottery class at the community hall."),
             fact(2, "Theo runs a marathon every spring.")]
    by_meaning = profile_from(facts, 10, areas={1: "Interests"})
    assert by_meaning.splitlines() == ["Sport:", "- Theo runs a marathon every spring.",
                                       "Interests:", f"- {facts[0].statement}"]
    by_words = profile_from(facts, 10)  # "lives": Home, first of the areas
    assert by_words.splitlines() == ["Home:", f"- {facts[0].statement}",
                                     "Sport:", "- Theo runs a marathon every spring."]


@pytest.mark.parametrize(("statement", "area"), [
    ("Theo doesn't surf, but reading a great fantasy book helps Theo escape.", "Interests"),
    ("Theo has never been to a gym and bakes bread every Sunday.", "Interests"),
    ("Theo no longer runs; Theo swims twice a week instead.", "Sport"),
    ("Theo is not a big reader.", "Other"),
])
def test_what_a_person_does_not_do_is_not_their_area(statement: str, area: str) -> None:
    """Words say an area only where the line does not deny them: not doing a sport puts
    nobody under Sport."""
    assert topic(statement) == area

"""The model's JSON answers are each defined once (dreamd.dream.answers): the schema sent
as response_format and the check of what comes back come from the same typed model, and a
malformed answer is refused with the reason it was given before the models existed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dreamd.dream.jobs.facts_asked import sifted
from dreamd.dream.jobs.reflect import validate
from dreamd.errors import OutputInvalid
from dreamd.text.facts import MAX_CHARS

TURNS, KNOWN = {3, 4}, {1, 2}


def fact(**changes: Any) -> dict[str, Any]:
    good: dict[str, Any] = {"subject": "Sam", "statement": "Sam went to the lake with Ana.",
                            "about": None, "valid_from": None, "turns": [3], "replaces": []}
    return {key: value for key, value in {**good, **changes}.items() if value != "left out"}


# (the second fact of an answer, the reason it is dropped with: "check: why")
DROPPED = [
    ("not a fact", "shape: fact 2 is not an object"),
    (fact(subject=""), "shape: fact 2: subject must be a name"),
    (fact(subject="S" * 81), "shape: fact 2: subject must be a name"),
    (fact(subject=7), "shape: fact 2: subject must be a name"),
    (fact(statement="left out"), f"shape: fact 2: statement must be 1..{MAX_CHARS} characters"),
    (fact(statement=" "), f"shape: fact 2: statement must be 1..{MAX_CHARS} characters"),
    (fact(about="pet"), "shape: fact 2: about must be one of ['home', 'job', 'partner'] or "
                        "null"),
    (fact(valid_from="last week"), "shape: fact 2: valid_from must be YYYY-MM-DD or null"),
    (fact(valid_from=20230916), "shape: fact 2: valid_from must be YYYY-MM-DD or null"),
    (fact(turns=[]), "turns: fact 2: turns must name the given [ids]"),
    (fact(turns="left out"), "turns: fact 2: turns must name the given [ids]"),
    (fact(turns=[9]), "turns: fact 2: turns must name the given [ids]"),
    (fact(turns=["3"]), "turns: fact 2: turns must name the given [ids]"),
    (fact(replaces=[7]), "turns: fact 2: replaces must name known #ids"),
    (fact(replaces="#1"), "turns: fact 2: replaces must name known #ids"),
    (fact(subject="", turns=[9]), "shape: fact 2: subject must be a name"),  # the first
]


@pytest.mark.parametrize(("bad", "reason"), DROPPED)
def test_a_bad_fact_is_dropped_with_its_reason_and_the_good_one_kept(bad: Any,
                                                                     reason: str) -> None:
    found = sifted(json.dumps({"facts": [fact(), bad]}), TURNS, KNOWN)
    assert [f"{r.check}: {r.why}" for r in found.dropped] == [reason]
    assert [c.statement for c, _, _ in found.kept] == ["Sam went to the lake with Ana."]


@pytest.mark.parametrize("kept", [
    fact(about="left out", valid_from="left out", replaces="left out"),  # no grammar
    fact(replaces=None, extra="ignored"),
    fact(about="home", valid_from="2023-09-16", turns=[3, 4], replaces=[2]),
])
def test_a_fact_kept_as_before(kept: dict[str, Any]) -> None:
    found = sifted(json.dumps({"facts": [kept]}), TURNS, KNOWN)
    assert not found.dropped and len(found.kept) == 1
    candidate, turn, replaces = found.kept[0]
    assert (candidate.about, candidate.valid_from, turn, replaces) == (
        kept.get("about"), kept.get("valid_from"), 3, kept.get("replaces") or [])


def test_a_fact_whose_about_is_a_list_is_dropped_not_the_batch() -> None:
    """Checked field by field, an `about` that is a list is a bad fact (on c5757a7 it was
    a TypeError, `about not in ABOUTS` of an unhashable value, failing the whole batch)."""
    found = sifted(json.dumps({"facts": [fact(), fact(about=["job"])]}), TURNS, KNOWN)
    assert [r.check for r in found.dropped] == ["shape"] and len(found.kept) == 1


REFLECTION = {"mood": "calm", "mood_score": 0.2, "energy": 1, "self_narrative": "I listened.",
              "reflection": "Sam seemed rested.", "topics": ["rest"]}


@pytest.mark.parametrize(("changes", "reason"), [
    ({"mood": " "}, "reflection field 'mood' is missing or invalid: ' '"),
    ({"mood": "m" * 41}, f"reflection field 'mood' is missing or invalid: '{'m' * 41}'"),
    ({"mood_score": True}, "reflection field 'mood_score' is missing or invalid: True"),
    ({"mood_score": 1.5}, "reflection field 'mood_score' is missing or invalid: 1.5"),
    ({"energy": "high"}, "reflection field 'energy' is missing or invalid: 'high'"),
    ({"self_narrative": None}, "reflection field 'self_narrative' is missing or invalid: "
                               "None"),
    ({"topics": ["t"] * 21}, f"reflection field 'topics' is missing or invalid: "
                             f"{['t'] * 21!r}"),
    ({"topics": [3]}, "reflection field 'topics' is missing or invalid: [3]"),
    ({"mood": 3, "energy": 2}, "reflection field 'mood' is missing or invalid: 3"),
])
def test_a_bad_reflection_is_refused_naming_its_first_bad_field(changes: dict[str, Any],
                                                                 reason: str) -> None:
    with pytest.raises(OutputInvalid) as refused:
        validate(json.dumps({**REFLECTION, **changes}))
    assert str(refused.value) == reason


def test_a_reflection_is_kept_as_the_model_wrote_it() -> None:
    assert validate(json.dumps({**REFLECTION, "extra": 1})) == REFLECTION
    with pytest.raises(OutputInvalid, match="reflection field 'reflection' is missing"):
        validate(json.dumps({key: v for key, v in REFLECTION.items() if key != "reflection"}))


def strict_objects(schema: Any) -> list[dict[str, Any]]:
    """Every object of a JSON schema, checked for what strict structured outputs ask."""
    if isinstance(schema, list):
        return [o for each in schema for o in strict_objects(each)]
    if not isinstance(schema, dict):
        return []
    assert not {"$ref", "$defs", "title", "description", "default"} & schema.keys(), schema
    found = [schema] if schema.get("type") == "object" else []
    for key, value in schema.items():
        inner = value.values() if key == "properties" else [value]
        found += [o for each in inner for o in strict_objects(each)]
    return found


def test_the_schemas_sent_are_strict_and_are_the_answers_fields() -> None:
    from dreamd.dream.answers import FactItem, FactsAnswer, Reflection
    from dreamd.dream.prompts import facts_schema, reflect_schema

    objects = strict_objects(facts_schema()) + strict_objects(reflect_schema())
    assert len(objects) == 3
    for each in objects:
        assert each["additionalProperties"] is False
        assert each["required"] == list(each["properties"])
    items = facts_schema()["properties"]["facts"]["items"]
    assert list(items["properties"]) == list(FactItem.model_fields)
    assert list(facts_schema()["properties"]) == list(FactsAnswer.model_fields)
    assert list(reflect_schema()["properties"]) == list(Reflection.model_fields)
    assert items["properties"]["turns"] == {"type": "array", "items": {"type": "integer"}}


def test_a_field_added_to_an_answer_is_sent_and_checked() -> None:
    """One definition: a field added to an answer's model is in the schema sent (required)
    and refused when missing, with the reason the model gives it."""
    from typing import Annotated

    from pydantic import StrictStr

    from dreamd.dream.answers import FactItem, Why, checked, sent_schema, why_of

    class Feeling(FactItem):
        feeling: Annotated[StrictStr, Why("feeling must be a word", "feeling")]

    sent = sent_schema(Feeling)
    assert sent["properties"]["feeling"] == {"type": "string"}
    assert sent["required"][-1] == "feeling" and sent["additionalProperties"] is False
    context = {"turn_ids": TURNS, "known": KNOWN}
    assert checked(Feeling, fact(), context) == "feeling"
    assert why_of(Feeling, "feeling") == Why("feeling must be a word", "feeling")
    kept = checked(Feeling, fact(feeling="glad"), context)
    assert isinstance(kept, Feeling) and kept.feeling == "glad"

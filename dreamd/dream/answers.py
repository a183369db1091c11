"""The model's JSON answers, one typed model each: the schema sent as `response_format`
and the check of what comes back are both read from it.

The schema sent is strict (every property required, no other: the shape OpenAI's strict
structured outputs ask for, and a grammar-making server takes as it is). The check is
kinder to a server without grammars: a nullable field left out is null, `replaces` left
out is none, and keys not asked for are ignored. The bounds of lengths and ranges are
checked here, not sent: strict structured outputs take no such keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
)

from dreamd.text.dates import day_of
from dreamd.text.facts import MAX_CHARS

ABOUTS = ("job", "home", "partner")


@dataclass(frozen=True)
class Why:
    """A field's metadata: what a refusal of it says, and the check it counts under (see
    dreamd.dream.jobs.facts_asked.ITEM_CHECKS)."""

    text: str
    check: str = "shape"


def _stripped(most: int) -> AfterValidator:
    """Text of 1..`most` characters, not counting the spaces around it."""
    def check(text: str) -> str:
        if not 0 < len(text.strip()) <= most:
            raise ValueError(f"1..{most} characters")
        return text
    return AfterValidator(check)


def _within(low: float, high: float) -> AfterValidator:
    def check(value: float) -> float:
        if not low <= value <= high:  # NaN is not within anything
            raise ValueError(f"{low}..{high}")
        return value
    return AfterValidator(check)


def _at_most(most: int) -> AfterValidator:
    def check(value: str | list[Any]) -> Any:
        if len(value) > most:
            raise ValueError(f"at most {most}")
        return value
    return AfterValidator(check)


def _a_day(value: str | None) -> str | None:
    if value is not None and day_of(value) is None:
        raise ValueError("YYYY-MM-DD")
    return value


def _named_in(key: str, empty: bool) -> AfterValidator:
    """Ids all among the validation context's `key` (none given: any), and at least one
    unless `empty`."""
    def check(ids: list[int], info: ValidationInfo) -> list[int]:
        among = (info.context or {}).get(key)
        if (not ids and not empty) or (among is not None and not set(ids) <= among):
            raise ValueError(f"ids among the {key}")
        return ids
    return AfterValidator(check)


class FactItem(BaseModel):
    """One fact of a facts answer."""

    subject: Annotated[StrictStr, _stripped(80), Why("subject must be a name")]
    statement: Annotated[StrictStr, _stripped(MAX_CHARS),
                         Why(f"statement must be 1..{MAX_CHARS} characters")]
    about: Annotated[Literal["job", "home", "partner"] | None,
                     Why(f"about must be one of {sorted(ABOUTS)} or null")] = None
    valid_from: Annotated[StrictStr | None, AfterValidator(_a_day),
                          Why("valid_from must be YYYY-MM-DD or null")] = None
    turns: Annotated[list[StrictInt], _named_in("turn_ids", empty=False),
                     Why("turns must name the given [ids]", "turns")]
    replaces: Annotated[list[StrictInt], BeforeValidator(lambda ids: ids or []),
                        _named_in("known", empty=True),
                        Why("replaces must name known #ids", "turns")] = Field(
        default_factory=list)


class FactsAnswer(BaseModel):
    """The facts drawn from a batch of turns (checked fact by fact: see FactItem)."""

    facts: list[FactItem]


class Reflection(BaseModel):
    """The agent's reflection on its recent conversations with a user."""

    mood: Annotated[StrictStr, _stripped(40)]
    mood_score: Annotated[StrictFloat, _within(-1.0, 1.0)]
    energy: Annotated[StrictFloat, _within(0.0, 1.0)]
    self_narrative: Annotated[StrictStr, _stripped(2000)]
    reflection: Annotated[StrictStr, _stripped(1000)]
    topics: Annotated[list[Annotated[StrictStr, _at_most(80)]], _at_most(20)]


Answer = TypeVar("Answer", bound=BaseModel)


def checked(model: type[Answer], data: Any, context: Mapping[str, Any] | None = None
            ) -> Answer | str:
    """`data` as a `model`, or the name of the first field it refuses ("" when `data` is
    no object at all). `context` holds what ids may be named (see FactItem)."""
    try:
        return model.model_validate(data, context=dict(context or {}))
    except ValidationError as exc:
        where = exc.errors()[0]["loc"]
        return str(where[0]) if where else ""


def why_of(model: type[BaseModel], name: str) -> Why:
    """What a refusal of the field `name` of `model` says."""
    found = [m for m in model.model_fields[name].metadata if isinstance(m, Why)]
    return found[0] if found else Why(f"{name} is missing or invalid")


# What pydantic writes in a schema that is not sent: names, defaults, and the models'
# docstrings (written for whoever reads the code, not for the model).
UNSENT = frozenset({"title", "default", "description"})


def sent_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema as strict structured outputs take it: nested models inline,
    every object's properties all required and no other, and nothing in UNSENT."""
    full = model.model_json_schema()
    defs: dict[str, Any] = full.pop("$defs", {})

    def strict(node: Any) -> Any:
        if isinstance(node, list):
            return [strict(each) for each in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return strict(defs[node["$ref"].rsplit("/", 1)[-1]])
        out = {key: _each(value, strict) if key == "properties" else strict(value)
               for key, value in node.items() if key not in UNSENT}
        if out.get("type") == "object":
            out["required"] = list(out.get("properties", {}))
            out["additionalProperties"] = False
        return out

    return dict(strict(full))


def _each(properties: dict[str, Any], strict: Callable[[Any], Any]) -> dict[str, Any]:
    """A schema's properties, each made strict (a property may be called "title")."""
    return {name: strict(schema) for name, schema in properties.items()}

"""Typed results: a run's `output_schema` is what `finish` takes, and what its answer is checked
against. Pure (the worker's `check_finish` activity resolves a large answer, then asks here).

The schema reaches the model as the `answer` parameter of `finish` (so a provider that enforces
tool schemas enforces it natively); whatever the provider did, the answer is checked here before
the run may complete, and each failing place is named to the model as a JSON path
(`$.items[0].price`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capstan.core import schemas

__all__ = [
    "MAX_ANSWER_CHARS",
    "CheckedAnswer",
    "answer_json",
    "check_answer",
    "finish_parameters",
    "schema_problem",
    "strict_subset",
]

#: where a schema keeps the definitions its `$ref`s point to (`#/$defs/...`)
_DEFINITIONS = ("$defs", "definitions")
#: the largest answer (the `finish` arguments' JSON) the worker checks: a bound on its work
MAX_ANSWER_CHARS = 4_000_000
#: keywords that move references' base or resolve them dynamically: refused in an output
#: schema, whose references must still resolve once it sits under `finish`'s `answer`
_MOVING = ("$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef")


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why an output schema cannot be offered under `finish` and checked (one line), beyond
    `capstan.core.schemas.schema_problem`: every `$ref` names one of its top-level
    definitions (`#/$defs/NAME`, `#/definitions/NAME`), which move with it; none points into
    the schema elsewhere (`#`, `#/properties/...`), outside it, or at nothing."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        moving = [k for k in _MOVING if k in node]
        if moving:
            return f"{moving[0]} is not supported in an output schema"
        ref = node.get("$ref")
        if isinstance(ref, str) and (problem := _ref_problem(schema, ref)) is not None:
            return problem
        stack.extend(node.values())
    return None


def _ref_problem(schema: Mapping[str, Any], ref: str) -> str | None:
    parts = ref.split("/")
    shown = repr(ref[:200])
    if len(parts) != 3 or parts[0] != "#" or parts[1] not in _DEFINITIONS or not parts[2]:
        return f"$ref {shown} must name one of the schema's definitions (#/$defs/NAME)"
    name = parts[2].replace("~1", "/").replace("~0", "~")
    definitions = schema.get(parts[1])
    if not isinstance(definitions, dict) or name not in definitions:
        return f"$ref {shown} names no definition of the schema"
    return None


def finish_parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`finish`'s parameters for a typed run: `{"answer": <schema>}`. Definitions move to the
    top so that the schema's `#/$defs/...` references still point at them."""
    answer = {k: v for k, v in schema.items() if k not in _DEFINITIONS}
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"answer": answer},
        "required": ["answer"],
        "additionalProperties": False,
    }
    for key in _DEFINITIONS:
        if key in schema:
            parameters[key] = schema[key]
    return parameters


#: keywords OpenAI's strict function calling accepts (its structured-outputs subset)
_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "$ref", "$defs", "description", "title", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems",
        "maxItems", "default",
    }
)  # fmt: skip


def strict_subset(schema: Mapping[str, Any]) -> bool:
    """Whether a provider's strict mode can enforce `schema` exactly: every object closed
    (`additionalProperties: false`) with every property required, and only the keywords of
    the strict subset. Otherwise the schema is still offered, and checked by the worker."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if set(node) - _STRICT_KEYWORDS:
            return False
        properties = node.get("properties")
        if node.get("type") == "object" or properties is not None:
            # every object closed, each of its properties required: strict mode's rules
            if node.get("additionalProperties") is not False or not isinstance(properties, dict):
                return False
            if set(node.get("required", ())) != set(properties):
                return False
            stack.extend(properties.values())
        for key in ("items", "anyOf", "$defs"):
            value = node.get(key)
            stack.extend(value.values() if isinstance(value, dict) and key == "$defs" else [value])
    return True


def answer_json(value: Any) -> str:
    """The stored form of an answer: its JSON, in the order the model gave it, unescaped."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class CheckedAnswer:
    """A typed `finish`'s answer as JSON (`answer`, None when it could not be read) and what
    is wrong with it (`errors`: empty when the schema accepts it)."""

    answer: str | None
    errors: tuple[str, ...] = ()


def check_answer(schema: Mapping[str, Any], arguments: str) -> CheckedAnswer:
    """Read the `answer` of a typed `finish` call's arguments and check it against `schema`."""
    if len(arguments) > MAX_ANSWER_CHARS:
        size = f"{len(arguments):,} characters (at most {MAX_ANSWER_CHARS:,})"
        return CheckedAnswer(None, (f"the answer is too large to check: {size}",))
    try:
        return _checked(schema, arguments)
    except RecursionError:  # nested deeper than Python parses or writes JSON
        return CheckedAnswer(None, ("the answer nests too deeply",))


def _checked(schema: Mapping[str, Any], arguments: str) -> CheckedAnswer:
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return CheckedAnswer(None, (f"the arguments are not valid JSON ({exc.msg})",))
    if not isinstance(parsed, dict) or "answer" not in parsed:
        return CheckedAnswer(None, ("the arguments need a field `answer` holding the answer",))
    answer = parsed["answer"]
    checked = schemas.check(schema, answer, paths="json")
    if checked.refused is None and checked.errors and isinstance(answer, str):
        # a model that sent its answer as a JSON string: accepted when the string is it
        try:
            inner = json.loads(answer)
        except json.JSONDecodeError:
            inner = None
        if inner is not None and schemas.check(schema, inner, paths="json") == schemas.Checked():
            return CheckedAnswer(answer_json(inner))
    if checked.refused is not None:
        return CheckedAnswer(answer_json(answer), (f"$: {checked.refused}",))
    return CheckedAnswer(answer_json(answer), checked.errors)

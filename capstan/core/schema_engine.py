"""The jsonschema side of `capstan.core.schemas`: draft 2020-12 with RE2 for every regex keyword,
every keyword evaluation counted, and a registry that fetches nothing.

Kept apart so that jsonschema, `referencing` and their bundled metaschemas load on the first
validation, not with the core's types (a client command never validates a tool's schema). Pure:
no IO, no clock. Everything here is reached through `capstan.core.schemas`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable

from capstan.core import patterns

__all__ = [
    "STEPS",
    "Steps",
    "TooMuchWorkError",
    "Unresolvable",
    "bounded",
    "metaschema_problem",
    "ref_of",
]


#: the longest message of one failed keyword (jsonschema's repeat the failing value)
MESSAGE_CHARS = 300


class TooMuchWorkError(Exception):
    pass


@dataclass
class Steps:
    left: int


#: the step budget of the validation in progress in this thread (none outside one)
STEPS: ContextVar[Steps | None] = ContextVar("capstan_schema_steps", default=None)


def _refuse(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # never fetched: a schema refers only to itself


_REGISTRY: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _regex_format(instance: object) -> bool:
    if isinstance(instance, str):
        patterns.compile_pattern(instance)
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checks("regex", raises=patterns.PatternError)(_regex_format)
    return checker


_META_FORMATS = _format_checker()


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not patterns.search(pattern, str(instance)):
        yield ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, rules: Mapping[str, Any], instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in rules.items():
        for key, value in instance.items():
            if patterns.search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, rule: Any, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    known = schema.get("properties", {})
    regexes = list(schema.get("patternProperties", {}))
    extras = sorted(
        (k for k in instance if k not in known and not any(patterns.search(p, k) for p in regexes)),
        key=str,
    )
    if isinstance(rule, dict):
        for extra in extras:
            yield from validator.descend(instance[extra], rule, path=extra)
    elif rule is False and extras:
        shown = ", ".join(repr(e) for e in extras[:10])
        yield ValidationError(f"additional properties are not allowed ({shown} unexpected)")


def _unique_items(
    validator: Any, unique: bool, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """`uniqueItems` in linear time (jsonschema's compares every pair): items as canonical
    JSON, with `1` and `1.0` and `true` told apart as JSON Schema says (bools are not numbers)."""
    if not unique or not isinstance(instance, list):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_canonical(item), sort_keys=True, separators=(",", ":"), default=str)
        if key in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _cost(name: str, value: Any, instance: Any) -> int:
    """Steps one evaluation of keyword `name` takes: one, or the size of the data it compares
    (an `enum` of 9,000 values checked for each of 6,000 items is 54 million comparisons)."""
    if name == "enum" and isinstance(value, list):
        return 1 + len(value)
    if name in ("uniqueItems", "contains", "prefixItems") and isinstance(instance, list):
        return 1 + len(instance)
    if name in ("const", "enum", "uniqueItems"):
        return 1 + len(str(value)) // 64
    return 1


def _counted(name: str, keyword: Any) -> Any:
    """`keyword` charging the validation's step budget for each evaluation (`_cost`), and its
    messages cut to `MESSAGE_CHARS` (jsonschema repeats the failing value in them)."""

    def evaluate(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        steps = STEPS.get()
        if steps is not None:
            steps.left -= _cost(name, value, instance)
            if steps.left < 0:
                raise TooMuchWorkError
        for error in keyword(validator, value, instance, schema) or ():
            if len(error.message) > MESSAGE_CHARS:
                error.message = error.message[: MESSAGE_CHARS - 3] + "..."
            yield error

    return evaluate


def _bounded_validator() -> Any:
    """Draft 2020-12 with RE2 for every regex keyword and every keyword counted."""
    own = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
    }
    keywords = {
        name: _counted(name, own.get(name, keyword))
        for name, keyword in Draft202012Validator.VALIDATORS.items()
    }
    return extend(Draft202012Validator, validators=keywords)  # type: ignore[no-untyped-call]


_Bounded = _bounded_validator()


def metaschema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` is not a draft 2020-12 schema (its regexes compiled in RE2), or None."""
    try:
        Draft202012Validator.check_schema(schema, format_checker=_META_FORMATS)
    except SchemaError as exc:
        return _schema_error(exc)
    except RecursionError:
        return "it nests too deeply"
    return None


def bounded(schema: dict[str, Any]) -> Validator:
    """The bounded validator of a schema `metaschema_problem` accepted."""
    return _Bounded(schema, registry=_REGISTRY)  # type: ignore[no-any-return]


def _schema_error(exc: SchemaError) -> str:
    if isinstance(exc.cause, patterns.PatternError):
        return str(exc.cause)
    where = "/".join(str(p) for p in exc.absolute_path)
    return " ".join(f"{where or 'schema'}: {exc.message}".split())[:300]


def ref_of(exc: Unresolvable) -> str:
    ref = str(getattr(exc, "ref", "") or getattr(getattr(exc, "_wrapped", None), "ref", ""))
    return ref[:200]


def _short(instance: object) -> str:
    text = repr(instance)
    return text if len(text) <= 80 else text[:77] + "..."

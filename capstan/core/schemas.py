"""Tool schemas (JSON Schema 2020-12) checked with no IO and bounded work: one validator factory.

A tool's input schema comes from its source (a builtin's signature, a user tool, an MCP server)
and is recorded in the run's catalog; the gate validates every call's arguments against it in
workflow code. Whatever the schema says, validating with it:

- never fetches anything: a `$ref` resolves inside the schema (or to a bundled metaschema);
  anything else is refused (`referencing.Registry` whose retrieve refuses every URI);
- matches `pattern` and `patternProperties` (and `additionalProperties`' view of them) in RE2,
  in linear time (`capstan.core.patterns`); the metaschema's `format: regex` compiles in RE2;
- is bounded: a schema of at most `MAX_SCHEMA_NODES` values nested `MAX_SCHEMA_DEPTH` deep, and
  at most `MAX_STEPS` keyword evaluations per validation (a chain of `$ref`s doubling at each
  level would otherwise take exponential time), counted, never timed;
- never raises: a schema that cannot be used is a problem string (`schema_problem`), which the
  gate shows the model as the reason its call is refused, and MCP listing records as a note.

jsonschema itself (`capstan.core.schema_engine`) is imported on the first validation: a process
that never validates a schema (every client command) never loads it.

Nested `$schema` keywords are refused: jsonschema would switch to its stock validator class for
that subschema, whose keywords match with Python's `re`. `unevaluatedProperties` beside
`patternProperties` is refused for the same reason (jsonschema evaluates it with `re`). Pure:
never any IO, never a clock; the caches only save work.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "MAX_STEPS",
    "Checked",
    "check",
    "json_path",
    "schema_problem",
]

MAX_SCHEMA_NODES = 20_000
MAX_SCHEMA_DEPTH = 64
#: keyword evaluations per validation; a tool's arguments (inline: at most a few KB) take far
#: fewer against any schema a tool would really declare
MAX_STEPS = 20_000
_SHOWN_ERRORS = 5
_COLLECTED_ERRORS = 50
_CACHE = 256


@dataclass(frozen=True)
class _Built:
    validator: Validator | None
    problem: str | None


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` cannot be used to validate a tool's arguments (one line), or None."""
    return _build(_key(schema)).problem


@dataclass(frozen=True)
class Checked:
    """What validating a tool's arguments found: why the schema refuses to judge them at all
    (`refused`: it cannot be used, refers outside itself, or takes too much work), or what is
    wrong with them (`errors`, `where: what`, at most a few; empty when they are valid)."""

    refused: str | None = None
    errors: tuple[str, ...] = ()


def json_path(path: Iterable[str | int]) -> str:
    """`$.items[0].price`: where in a JSON value an error is (an answer's, for the model)."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def check(
    schema: Mapping[str, Any], value: Any, *, paths: Literal["arguments", "json"] = "arguments"
) -> Checked:
    """Validate `value` against `schema` without IO and within `MAX_STEPS`; never raises.
    Errors say where as `text.0.name` (a tool's arguments, `paths="arguments"`) or as a JSON
    path `$.text[0].name` (`paths="json"`, an answer)."""
    built = _build(_key(schema))
    if built.validator is None:
        return Checked(refused=f"its schema cannot be used: {built.problem}")
    from capstan.core import schema_engine as engine  # see the module docstring

    token = engine.STEPS.set(engine.Steps(MAX_STEPS))
    try:
        # the first few in jsonschema's (stable) order: never every error of a huge value
        found = itertools.islice(built.validator.iter_errors(value), _COLLECTED_ERRORS)
        errors = sorted(found, key=lambda e: (list(e.absolute_path), e.message))
    except engine.TooMuchWorkError:
        return Checked(refused=f"its schema takes more than {MAX_STEPS} steps to check")
    except engine.Unresolvable as exc:
        return Checked(
            refused=f"its schema refers to {engine.ref_of(exc)!r}, outside itself (never fetched)"
        )
    except RecursionError:
        return Checked(refused="its schema refers to itself, or nests, too deeply to check them")
    except Exception as exc:  # a keyword the metaschema allows but jsonschema cannot apply
        return Checked(refused=f"its schema cannot be applied ({type(exc).__name__})")
    finally:
        engine.STEPS.reset(token)
    return Checked(
        errors=tuple(
            f"{_where(e.absolute_path, paths)}: {e.message}" for e in errors[:_SHOWN_ERRORS]
        )
    )


def _where(path: Iterable[str | int], paths: Literal["arguments", "json"]) -> str:
    if paths == "json":
        return json_path(path)
    return ".".join(str(p) for p in path) or "arguments"


def _key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)


@lru_cache(maxsize=_CACHE)
def _build(key: str) -> _Built:
    schema = json.loads(key)
    if not isinstance(schema, dict):
        return _Built(None, "a tool's schema must be a JSON object")
    schema.pop("$schema", None)  # validated as 2020-12, whatever it names (see the docstring)
    problem = _shape_problem(schema)
    from capstan.core import schema_engine as engine  # see the module docstring

    if problem is None:
        problem = engine.metaschema_problem(schema)
    if problem is not None:
        return _Built(None, problem)
    return _Built(engine.bounded(schema), None)


def _shape_problem(schema: dict[str, Any]) -> str | None:
    """Size, depth, nested `$schema`, and keyword combinations evaluated with Python's `re`."""
    nodes, uses = 0, set[str]()
    stack: list[tuple[object, int]] = [(schema, 0)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            return f"it has more than {MAX_SCHEMA_NODES} values"
        if depth > MAX_SCHEMA_DEPTH:
            return f"it nests deeper than {MAX_SCHEMA_DEPTH} levels"
        if isinstance(value, dict):
            if "$schema" in value:
                return "a nested $schema is not supported (the whole schema is draft 2020-12)"
            uses.update(k for k in ("patternProperties", "unevaluatedProperties") if k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    if {"patternProperties", "unevaluatedProperties"} <= uses:
        return "unevaluatedProperties together with patternProperties is not supported"
    return None

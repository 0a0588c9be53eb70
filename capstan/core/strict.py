"""Models that refuse what they do not know, and validation errors said in one line.

Every model a caller writes (a `RunSpec` and its parts, a steering input) derives from
`StrictModel`: an unknown field is an error naming the field and the nearest known one
("did you mean"), from every entry point alike — Python, the HTTP API, the CLI, a raw Temporal
signal. A silently dropped field is the worst kind of mistake: `max_step=3` would run 25 steps.

`describe_invalid` turns a pydantic `ValidationError` into the short line a diagnostic, an API
error or a CLI message shows (never a multi-line dump, never the whole input). Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

__all__ = ["StrictModel", "describe_invalid", "revised", "unknown_fields_problem"]

M = TypeVar("M", bound=BaseModel)

#: A one-line description keeps this many errors and characters.
_MAX_ERRORS = 3
_MAX_CHARS = 300


def unknown_fields_problem(unknown: Iterable[str], known: Iterable[str]) -> str:
    """`unknown field 'max_step' (did you mean 'max_steps'?)`, for each unknown name."""
    choices = sorted(known)
    parts = []
    for name in unknown:
        shown = name if len(name) <= 60 else name[:59] + "…"
        close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        parts.append(f"unknown field {shown!r}{hint}")
    return "; ".join(parts[:_MAX_ERRORS])


class StrictModel(BaseModel):
    """A model whose unknown fields are refused with a suggestion (see the module docstring).

    pydantic's own `extra="forbid"` finds them, so each error keeps its location (the API
    answers `body.max_step`); this model only rewords its own level's errors to name the
    nearest known field (a nested model rewords its own)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _known_fields(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            errors = exc.errors()
            if not any(_own_unknown(e) for e in errors):
                raise
            known = list(cls.model_fields)
            details = [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "extra_forbidden",
                        "{problem}",
                        {"problem": unknown_fields_problem([str(e["loc"][0])], known)},
                    ),
                    loc=e["loc"],
                    input=e["input"],
                )
                if _own_unknown(e)
                else cast(InitErrorDetails, e)
                for e in errors
            ]
            raise ValidationError.from_exception_data(exc.title, details) from None


def _own_unknown(error: ErrorDetails) -> bool:
    return (
        error["type"] == "extra_forbidden"
        and len(error["loc"]) == 1
        and not error.get("ctx")  # not already reworded
    )


def describe_invalid(exc: ValidationError) -> str:
    """The first few errors of `exc` as `where: what`, in one bounded line."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:_MAX_ERRORS]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "union_tag_not_found":
            field = (error.get("ctx") or {}).get("discriminator", "kind")
            message = f"needs a {field} field naming what it is"
        parts.append(f"{where}: {message}" if where else message)
    more = exc.error_count() - len(parts)
    line = "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
    line = " ".join(line.split())
    return line if len(line) <= _MAX_CHARS else line[: _MAX_CHARS - 1] + "…"


def revised(model: M, **changes: object) -> M:
    """`model` with `changes`, validated like input; a name that is not a field of it raises.

    The core's way to change a pydantic model: `model_copy(update=...)` takes any key and any
    value silently (a typo changes nothing, a wrong type goes unchecked)."""
    fields = type(model).model_fields
    unknown = [name for name in changes if name not in fields]
    if unknown:
        raise ValueError(f"{type(model).__name__}: {unknown_fields_problem(unknown, fields)}")
    return type(model).model_validate({**dict(model), **changes})

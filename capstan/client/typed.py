"""Typed results for Python callers: a type given once becomes the run's `output_schema`, and the
run's JSON answer comes back validated as that type.

    from pydantic import BaseModel

    class Invoice(BaseModel):
        number: str
        total_cents: int

    run_id = await client.start_run(RunSpec(task="read invoice.pdf"), output_type=Invoice)
    invoice = await client.result(run_id, output_type=Invoice)  # an Invoice, validated

Any type pydantic can validate works (a model, a dataclass, `list[Invoice]`); its JSON Schema
(`TypeAdapter.json_schema`) is what the worker checks the answer against.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import JsonValue, TypeAdapter, ValidationError

from capstan.core.errors import CapstanError
from capstan.core.spec import RunResult, RunSpec, RunStatus, TerminalReason

__all__ = [
    "OutputTypeError",
    "RunNotCompletedError",
    "RunStatusView",
    "schema_of",
    "typed_output",
    "typed_spec",
]


T = TypeVar("T")


class RunNotCompletedError(CapstanError):
    """A typed result was asked of a run that did not complete; `result` says how it ended
    (for `output_invalid`: its last answer in `output`, the schema's complaints in `error`)."""

    def __init__(self, result: RunResult) -> None:
        why = f": {result.error}" if result.error else ""
        super().__init__(f"run {result.run_id} ended {result.terminal_reason.value}{why}")
        self.result = result


class OutputTypeError(CapstanError):
    """The run's answer is not valid as the type asked for (a type other than the one the run
    was started with, or a run started without one)."""


class RunStatusView(RunStatus):
    """A run's status as `GET /api/runs/{id}` and `capstan status --json` show it: `output` is
    data — a typed result's JSON value (`output_format: json`), else the answer's text (a large
    one resolved from the blob store)."""

    output: JsonValue = None  # type: ignore[assignment]


def schema_of(output_type: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a type pydantic can validate."""
    schema: dict[str, Any] = TypeAdapter(output_type).json_schema()
    return schema


def typed_spec(spec: RunSpec, output_type: Any) -> RunSpec:
    """`spec` asking for an answer of `output_type` (validated as any spec is)."""
    return RunSpec.model_validate(
        {**spec.model_dump(exclude_unset=True), "output_schema": schema_of(output_type)}
    )


def typed_output(result: RunResult, text: str, output_type: type[T]) -> T:
    """The completed run's answer (`text`, its output resolved) as a validated `output_type`."""
    if result.terminal_reason is not TerminalReason.COMPLETED:
        raise RunNotCompletedError(result)
    try:
        value: T = TypeAdapter(output_type).validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the answer"
        raise OutputTypeError(
            f"run {result.run_id}: its answer is not a valid {_name(output_type)} "
            f"({where}: {first['msg']}; {exc.error_count()} error(s))"
        ) from None
    return value


def _name(output_type: Any) -> str:
    return getattr(output_type, "__name__", None) or str(output_type)

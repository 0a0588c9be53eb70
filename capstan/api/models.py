"""The HTTP API's own request and response bodies.

Everything else the API returns is the CLI's `--json` shape, from the same models: `RunStatus`,
`PendingView`, `StepView`, `RunSummary`, `RunEvent`. Fields are only ever added.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model

from capstan.api.errors import ApiError
from capstan.core.spec import INTERNAL_FIELDS, RunSpec
from capstan.core.strict import StrictModel

__all__ = [
    "ApproveBody",
    "AuditCheck",
    "DenyBody",
    "ForkRequest",
    "RunRequest",
    "StartedRun",
    "SteerResult",
    "Whoami",
    "spec_of",
]

InputId = Field("", max_length=200, description="input id: the same id twice is applied once")


#: `POST /api/runs`: a `RunSpec` as a caller may write it. Derived from `RunSpec` (one place for
#: each field) without the fields Capstan sets itself (`INTERNAL_FIELDS`: threads, delegation),
#: which are then unknown fields like any misspelt one, refused with a "did you mean".
RunRequest = create_model(
    "RunRequest",
    __base__=StrictModel,
    __doc__="The spec of a new run: every field but `task` optional (see `RunSpec`).",
    **{  # type: ignore[call-overload]
        name: (field.annotation, field)
        for name, field in RunSpec.model_fields.items()
        if name not in INTERNAL_FIELDS
    },
)


def spec_of(request: BaseModel) -> RunSpec:
    """The `RunSpec` a `RunRequest` asks for; the fields it set stay the spec's set fields.
    `RunSpec`'s own checks (an output schema that cannot be used, ...) are a 422 naming the
    field, as the request's shape is."""
    try:
        return RunSpec.model_validate(request.model_dump(exclude_unset=True))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("body", *first["loc"]))
        message = " ".join(f"{where}: {first['msg']}".split())
        raise ApiError(422, "invalid", message, field=where) from None


class ForkRequest(StrictModel):
    """`POST /api/runs/{run_id}/fork` (`capstan fork`): where the fork goes on from, and what it
    changes of the parent's spec (`spec`: any fields a `RunRequest` takes)."""

    at_step: int = Field(ge=0, description="go on after the parent's Nth model call (0: its task)")
    model: str | None = Field(None, max_length=200, description="another model profile")
    system_prompt: str | None = Field(None, max_length=100_000, description="another system prompt")
    spec: dict[str, Any] = Field(default_factory=dict, description="RunSpec fields to change")


def fork_overrides(body: ForkRequest) -> dict[str, Any]:
    """The spec fields a fork changes, each a field a caller may set (else 422 naming it)."""
    for name in body.spec:
        if name not in RunRequest.model_fields or name in ("task", "run_id"):
            raise ApiError(422, "invalid", f"a fork cannot set {name!r}", field=f"body.spec.{name}")
    return dict(body.spec)


class StartedRun(BaseModel):
    """`capstan run --json`; `warnings` says what the caller would otherwise not see (no
    worker polls the run's queue: the run is stored and waits for one)."""

    run_id: str
    warnings: list[str] = []


class SteerResult(BaseModel):
    """What a steering request did: sent as a signal (applied at the run's next step
    boundary), or applied / ignored as a duplicate by the validated update."""

    run_id: str
    input: str
    id: str
    delivery: Literal["signal", "update"]
    applied: bool | None = None
    detail: str = ""


class ApproveBody(StrictModel):
    """Approve the open request (`capstan approve`): as it is, with edited `arguments`
    (re-validated against the tool's schema), or `always` for the rest of the run."""

    request_id: str | None = Field(None, max_length=1200, description="default: the only one")
    args_hash: str | None = Field(None, max_length=128, description="the hash you were shown")
    arguments: dict[str, Any] | None = Field(None, description="run with these arguments")
    always: bool = False
    reason: str = Field("", max_length=10_000)
    id: str = InputId


class DenyBody(StrictModel):
    """Deny the open request (`capstan deny`); the reason is what the model sees."""

    request_id: str | None = Field(None, max_length=1200, description="default: the only one")
    args_hash: str | None = Field(None, max_length=128)
    reason: str = Field(min_length=1, max_length=10_000)
    id: str = InputId


class Whoami(BaseModel):
    identity: str
    tenant: str
    scopes: list[str]


class AuditCheck(BaseModel):
    """`capstan audit --verify`: every blob re-hashed and the record chain checked."""

    records: int
    problems: list[str]

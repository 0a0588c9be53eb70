"""Steering routes: one per input type of the steering registry, plus approve and deny.

`POST /api/runs/{run_id}/{command}` exists for every input in `STEERING_TYPES` whose CLI
command is generated (pause, resume, cancel, send, answer, grant, grant-budget, and any input
added later): its body is the input's fields less `kind` and `identity`. The identity recorded
with the input is always the token's, never one the body claims. Approve and deny are written by
hand, as in the CLI, because they look up the open request and the hash the reviewer was shown;
edited arguments are checked against the tool's schema before they are sent.

Inputs go as signals (durable with no worker running); `?checked=true` sends the validated
update, whose rejection is a 409. Decisions use the update whenever a worker polls, so a stale
or mismatched decision is refused at once.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, create_model

from capstan.api.auth import Principal, Scope
from capstan.api.backend import tenancy, writer
from capstan.api.edits import edit_problem
from capstan.api.errors import ERROR_RESPONSES, ApiError
from capstan.api.models import ApproveBody, DenyBody, SteerResult
from capstan.api.routes import RunIdPath
from capstan.api.tenancy import Tenancy
from capstan.core.errors import SteeringError
from capstan.core.steering import (
    STEERING_TYPES,
    Ack,
    ApprovalRequest,
    Decision,
    SteeringBase,
    SteeringPayload,
    pick_request,
)
from capstan.core.strict import StrictModel

__all__ = ["body_model", "decide_request", "router", "scope_of", "send_input"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES, tags=["steering"])
Runs = Annotated[Tenancy, Depends(tenancy)]
Approver = Annotated[Principal, Depends(writer(Scope.APPROVE))]
#: how long a validated update waits for a worker before it goes as a signal (seconds)
UPDATE_TIMEOUT = 10.0
#: inputs that settle a request a human was asked: they need the `approve` scope
_SETTLES_REQUESTS = frozenset({"decision", "answer"})


def scope_of(kind: type[SteeringPayload]) -> Scope:
    settles = kind.model_fields["kind"].default in _SETTLES_REQUESTS
    return Scope.APPROVE if settles else Scope.STEER


def body_model(kind: type[SteeringPayload]) -> type[BaseModel]:
    """The request body of an input's route: its fields, less `kind` and `identity`."""
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in kind.model_fields.items()
        if name not in ("kind", "identity")
    }
    return create_model(
        f"{kind.__name__}Body",
        __base__=StrictModel,
        __doc__=kind.__doc__,
        **fields,
    )


def _result(run_id: str, item: SteeringBase, ack: Ack | None) -> SteerResult:
    kind = str(type(item).model_fields["kind"].default)
    if ack is None:
        return SteerResult(run_id=run_id, input=kind, id=item.id, delivery="signal")
    return SteerResult(
        run_id=run_id,
        input=kind,
        id=item.id,
        delivery="update",
        applied=ack.applied,
        detail=ack.detail,
    )


async def _deliver(runs: Tenancy, run_id: str, item: SteeringBase, checked: bool) -> SteerResult:
    """Send the input; a validated update that no worker takes within `UPDATE_TIMEOUT` goes
    as a signal (the same id, so it is applied once), as `CapstanClient.steer` does. If
    Temporal gives up on the update first, `UpdateTimeoutError` answers 503."""
    target = run_id
    request_id = getattr(item, "request_id", None)
    if isinstance(request_id, str):
        # a delegated child's request is decided on the child that opened it (its id is a path
        # under this run's), so the reviewer can decide it from the parent
        target = await runs.client.owner(run_id, request_id)
    ack = await runs.client.steer(target, item, checked, update_timeout=UPDATE_TIMEOUT)
    return _result(run_id, item, ack)


async def send_input(
    runs: Tenancy, run_id: str, principal: Principal, item: SteeringBase, checked: bool
) -> SteerResult:
    """Send `item` to the principal's run, in the principal's name (the REST routes, MCP)."""
    await runs.owned(run_id, principal)
    item = item.model_copy(update={"identity": principal.identity, "id": item.id or _new_id()})
    return await _deliver(runs, run_id, item, checked)


def _new_id() -> str:
    return uuid.uuid4().hex


def _input_route(kind: type[SteeringPayload]) -> Callable[..., Awaitable[SteerResult]]:
    """The route function for one input type, with a signature FastAPI reads."""
    model = body_model(kind)
    optional = not any(info.is_required() for info in model.model_fields.values())

    async def endpoint(
        run_id: str, runs: Tenancy, principal: Principal, body: BaseModel | None, checked: bool
    ) -> SteerResult:
        values = body.model_dump() if body is not None else {}
        item = kind.model_validate(values)
        return await send_input(runs, run_id, principal, item, checked)

    p = inspect.Parameter.KEYWORD_ONLY
    body_type: Any = Annotated[model | None, Body()] if optional else Annotated[model, Body()]
    body_default = None if optional else inspect.Parameter.empty
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("run_id", p, annotation=RunIdPath),
            inspect.Parameter("runs", p, annotation=Runs),
            inspect.Parameter(
                "principal", p, annotation=Annotated[Principal, Depends(writer(scope_of(kind)))]
            ),
            inspect.Parameter("body", p, annotation=body_type, default=body_default),
            inspect.Parameter("checked", p, annotation=bool, default=False),
        ],
        return_annotation=SteerResult,
    )
    return endpoint


def _register_inputs() -> None:
    for kind in STEERING_TYPES:
        if kind.wire.custom_cli:
            continue
        command = kind.wire.commands[0]
        router.add_api_route(
            f"/runs/{{run_id}}/{command}",
            _input_route(kind),
            methods=["POST"],
            response_model=SteerResult,
            name=command.replace("-", "_"),  # the operation id: `grant-budget` -> grantBudget
            summary=kind.wire.help,
            description=f"`capstan {command}`: sends `{kind.__name__}`; event `{kind.wire.event}`.",
        )


_register_inputs()


async def _open_request(runs: Tenancy, run_id: str, request_id: str | None) -> ApprovalRequest:
    """The approval request a decision is for: the named one, or the only one open."""
    open_requests = (await runs.client.pending(run_id)).approvals
    try:
        return pick_request(open_requests, request_id, run_id, "decide")
    except SteeringError as exc:
        raise ApiError(409, "conflict", str(exc)) from exc


async def decide_request(
    *,
    runs: Tenancy,
    run_id: str,
    principal: Principal,
    body: ApproveBody | DenyBody,
    action: Literal["approve", "deny", "edit", "always"],
    arguments: str | None = None,
) -> SteerResult:
    """Decide an open approval request of the principal's run, bound to the hash of the
    arguments the reviewer was shown (the REST routes, MCP)."""
    await runs.owned(run_id, principal)
    request = await _open_request(runs, run_id, body.request_id)
    if arguments is not None:
        problem = await edit_problem(runs.client, run_id, request.tool, arguments)
        if problem is not None:
            raise ApiError(422, "invalid", problem, field="body.arguments")
    decision = Decision(
        request_id=request.request_id,
        args_hash=body.args_hash or request.args_hash,
        action=action,
        reason=body.reason,
        arguments=arguments,
        identity=principal.identity,
        id=body.id or _new_id(),
    )
    return await _deliver(runs, run_id, decision, await runs.client.workers_polling())


@router.post("/runs/{run_id}/approve", response_model=SteerResult)
async def approve(
    run_id: RunIdPath, runs: Runs, principal: Approver, body: ApproveBody | None = None
) -> SteerResult:
    """`capstan approve`: as asked, with edited `arguments`, or `always` for this tool."""
    body = body or ApproveBody()
    if body.arguments is not None:
        edited = json.dumps(body.arguments, ensure_ascii=False)
        return await decide_request(
            runs=runs,
            run_id=run_id,
            principal=principal,
            body=body,
            action="edit",
            arguments=edited,
        )
    action: Literal["approve", "always"] = "always" if body.always else "approve"
    return await decide_request(
        runs=runs, run_id=run_id, principal=principal, body=body, action=action
    )


@router.post("/runs/{run_id}/deny", response_model=SteerResult)
async def deny(run_id: RunIdPath, runs: Runs, principal: Approver, body: DenyBody) -> SteerResult:
    """`capstan deny`: the reason is the observation the model sees."""
    return await decide_request(
        runs=runs, run_id=run_id, principal=principal, body=body, action="deny"
    )

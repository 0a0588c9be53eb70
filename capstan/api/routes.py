"""REST routes for reading and starting runs: what `capstan run/ls/status/transcript/pending/
audit/watch` do, with their `--json` shapes. Steering routes are in `capstan.api.steer_routes`.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path as FilePath
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.responses import Response, StreamingResponse
from temporalio.service import RPCError

from capstan.api.auth import Principal, Scope, require
from capstan.api.backend import api_settings, tenancy, writer
from capstan.api.errors import ERROR_RESPONSES, ApiError
from capstan.api.models import (
    AuditCheck,
    ForkRequest,
    RunRequest,
    StartedRun,
    Whoami,
    fork_overrides,
    spec_of,
)
from capstan.api.stream import IncludeQuery, run_stream
from capstan.api.tenancy import RUN_ID_PATTERN, Tenancy
from capstan.audit.history import decode_history, load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail, verify_chain
from capstan.client.agents import AgentsError, resolve_agent
from capstan.client.forks import ForkError, fork_spec
from capstan.client.runs import CapstanError, RunSummary, tree_roots
from capstan.client.transcript import StepView, build_transcript
from capstan.client.typed import RunStatusView
from capstan.core import privilege
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.steering import PendingView
from capstan.runtime.api_settings import ApiSettings

__all__ = ["RunIdPath", "admitted", "from_agent", "router"]

RunIdPath = Annotated[str, Path(pattern=RUN_ID_PATTERN, max_length=200)]
Reader = Annotated[Principal, Depends(require(Scope.READ))]
Runs = Annotated[Tenancy, Depends(tenancy)]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES)

_AUDIT_TYPES = {
    "jsonl": "application/x-ndjson",
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
}


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"


def admitted(spec: RunSpec, principal: Principal, *, inherited: bool = False) -> RunSpec:
    """The final spec of a run the principal starts, through `capstan.core.privilege.admit`:
    refused (403) when it asks for what the token's scopes do not allow, narrowed to them when
    `inherited` (a thread's previous run). Every route that starts a run calls it."""
    try:
        return privilege.admit(spec, principal.scopes, inherited=inherited)
    except privilege.PrivilegeError as exc:
        raise ApiError(403, "forbidden", str(exc)) from None


@router.get("/whoami", response_model=Whoami, tags=["auth"])
async def whoami(principal: Reader) -> Whoami:
    """The identity, tenant and scopes of the calling token."""
    scopes = sorted(s.value for s in principal.scopes)
    return Whoami(identity=principal.identity, tenant=principal.tenant, scopes=scopes)


@router.post("/runs", response_model=StartedRun, status_code=201, tags=["runs"])
async def start_run(
    request: RunRequest,
    runs: Runs,
    principal: Annotated[Principal, Depends(writer(Scope.STEER))],
) -> StartedRun:
    """Start a run (`capstan run --json`); it belongs to the token's tenant. With `agent`, the
    server's agent definition (`CAPSTAN_AGENTS`) is the spec and the body's fields override it."""
    spec = spec_of(request)
    # a thread run needs signal-with-start and tenant checks; a body never points at a chain
    # (another tenant's) nor forges the messages a run starts with
    internal = ("continues", "continues_tail", "continues_tokens", "continues_unread")
    for name in ("thread", *internal, "forked_from"):
        if getattr(spec, name) != RunSpec.model_fields[name].default:
            message = "a thread's runs start with POST /api/threads/{thread}/messages"
            raise ApiError(422, "invalid", message, field=f"body.{name}")
    if spec.agent is not None:
        spec = from_agent(spec, runs.client.settings.agents_file)
    spec = admitted(spec, principal)  # the final spec: an agent's definition included
    run_id = await runs.start(spec, principal)
    warning = await runs.client.no_worker_warning(run_id)
    return StartedRun(run_id=run_id, warnings=[warning] if warning else [])


@router.post("/runs/{run_id}/fork", response_model=StartedRun, status_code=201, tags=["runs"])
async def fork_run(
    run_id: RunIdPath,
    body: ForkRequest,
    runs: Runs,
    principal: Annotated[Principal, Depends(writer(Scope.STEER))],
) -> StartedRun:
    """Start a run from this run's recorded conversation after step `at_step` (`capstan
    fork`): no model call or tool of the prefix is repeated. The parent's spec is narrowed to
    the token's scopes; what `spec` changes must be within them (403)."""
    await runs.owned(run_id, principal)
    overrides = fork_overrides(body)
    try:
        spec = await fork_spec(
            runs.client,
            run_id,
            body.at_step,
            model=body.model,
            system=body.system_prompt,
            overrides=overrides,
            narrow=lambda parent: privilege.admit(parent, principal.scopes, inherited=True),
        )
    except ForkError as exc:
        raise ApiError(422, "invalid", str(exc), field=f"body.{exc.field}") from None
    new_id = await runs.start(admitted(spec, principal), principal)
    warning = await runs.client.no_worker_warning(new_id)
    return StartedRun(run_id=new_id, warnings=[warning] if warning else [])


def from_agent(body: RunSpec, agents_file: FilePath | None) -> RunSpec:
    if agents_file is None:
        raise ApiError(422, "invalid", "this server has no agent definitions", field="body.agent")
    overrides = body.model_dump(exclude_unset=True, exclude={"task", "agent"})
    try:
        return resolve_agent(agents_file, str(body.agent), body.task, **overrides)
    except AgentsError as exc:
        message = str(exc).replace(f"{agents_file}: ", "")  # no server paths in answers
        raise ApiError(422, "invalid", message, field="body.agent") from None


@router.get("/runs", response_model=list[RunSummary], tags=["runs"])
async def list_runs(
    principal: Reader,
    runs: Runs,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    reason: TerminalReason | None = None,
) -> list[RunSummary]:
    """The tenant's runs, newest first (`capstan ls --json`)."""
    return await runs.runs(principal, limit, reason.value if reason else None)


@router.get("/runs/{run_id}", response_model=RunStatusView, tags=["runs"])
async def get_run(run_id: RunIdPath, principal: Reader, runs: Runs) -> RunStatusView:
    """Phase, step, terminal reason, output and usage (`capstan status --json`). `output` is
    data: a typed result's JSON value (`output_format: json`), else the answer's text."""
    await runs.owned(run_id, principal)
    return runs.client.status_view(await runs.client.status(run_id))


@router.get("/runs/{run_id}/transcript", response_model=list[StepView], tags=["runs"])
async def get_transcript(run_id: RunIdPath, principal: Reader, runs: Runs) -> list[StepView]:
    """Every step with refs resolved (`capstan transcript --json`)."""
    await runs.owned(run_id, principal)
    view = await runs.client.transcript_view(run_id)
    return build_transcript(runs.client.content(), view)


@router.get("/runs/{run_id}/pending", response_model=PendingView, tags=["steering"])
async def get_pending(run_id: RunIdPath, principal: Reader, runs: Runs) -> PendingView:
    """What the run waits for (`capstan pending RUN_ID --json`, one element)."""
    await runs.owned(run_id, principal)
    return await runs.client.pending(run_id)


@router.get("/pending", response_model=list[PendingView], tags=["steering"])
async def list_pending(principal: Reader, runs: Runs) -> list[PendingView]:
    """What every running run of the tenant waits for (`capstan pending --json`)."""
    views = []
    for run_id in tree_roots([run.run_id for run in await runs.open_runs(principal)]):
        with contextlib.suppress(CapstanError, RPCError, TimeoutError):
            views.append(await asyncio.wait_for(runs.client.pending(run_id), 10))
    return views


@router.get(
    "/runs/{run_id}/events",
    response_class=EventStreamResponse,
    tags=["runs"],
    responses={200: {"description": "Server-Sent Events: run_event (with id), text, end"}},
)
async def watch_run(
    *,
    run_id: RunIdPath,
    principal: Reader,
    runs: Runs,
    api: Annotated[ApiSettings, Depends(api_settings)],
    start: Annotated[int, Query(alias="from", ge=0, le=10**9)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    include: IncludeQuery = None,
) -> EventStreamResponse:
    """The run's step events as they happen, then `end` (`capstan watch --json` as SSE).
    Resume with `Last-Event-ID` (the last id seen) or `?from=N` (the first event wanted)."""
    await runs.owned(run_id, principal)
    if last_event_id is not None:
        if not last_event_id.strip().isdigit():
            raise ApiError(422, "invalid", "Last-Event-ID must be an event number", field="header")
        start = int(last_event_id) + 1
    stream = run_stream(
        runs.client,
        run_id,
        start,
        api.stream_poll_seconds,
        api.live_text_seconds,
        include=include or (),
    )
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(stream, headers=headers)


@router.get(
    "/runs/{run_id}/audit",
    response_class=Response,
    tags=["audit"],
    responses={200: {"content": {t.split(";")[0]: {} for t in _AUDIT_TYPES.values()}}},
)
async def get_audit(
    run_id: RunIdPath,
    principal: Reader,
    runs: Runs,
    format: Literal["jsonl", "md", "html"] = "jsonl",
) -> Response:
    """The verified audit trail (`capstan audit --format`)."""
    await runs.owned(run_id, principal)
    histories = await load_histories(runs.client.client, run_id)
    records, issues = build_trail([decode_history(h) for h in histories], runs.client.content())
    return Response(render_trail(records, issues, format), media_type=_AUDIT_TYPES[format])


@router.get("/runs/{run_id}/audit/verify", response_model=AuditCheck, tags=["audit"])
async def verify_audit(run_id: RunIdPath, principal: Reader, runs: Runs) -> AuditCheck:
    """Every blob re-hashed, the chain of records checked (`capstan audit --verify`)."""
    await runs.owned(run_id, principal)
    histories = await load_histories(runs.client.client, run_id)
    records, issues = build_trail([decode_history(h) for h in histories], runs.client.content())
    return AuditCheck(records=len(records), problems=issues + verify_chain(records))

"""Threads over HTTP: `capstan send --thread` and `capstan thread show` for a tenant.

A thread belongs to the tenant that started it, and tenants never share a thread id: the API
scopes a tenant's thread `support-42` to the workflow id `thread-acme:support-42` (the `default`
tenant's threads are the CLI's, unscoped; no tenant or thread name holds `:`, and no caller may
choose a run id starting with `thread-`: `capstan.core.tenants`). So two tenants sending to "the
same" thread at the same moment reach two threads, and signal-with-start can never deliver one
tenant's message to another's run. A thread's workflow is also checked by its tenant memo.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import Field

from capstan.api.auth import Principal, Scope, require
from capstan.api.backend import tenancy, writer
from capstan.api.errors import ERROR_RESPONSES, ApiError, not_found
from capstan.api.routes import admitted, from_agent
from capstan.api.tenancy import Tenancy
from capstan.client.runs import CapstanError, RunNotFoundError
from capstan.client.threads import Sent, ThreadError, ThreadRun, Threads, thread_workflow_id
from capstan.core.spec import RunSpec
from capstan.core.strict import StrictModel

__all__ = ["ThreadMessage", "router"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES, tags=["threads"])
Runs = Annotated[Tenancy, Depends(tenancy)]
ThreadPath = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")]


class ThreadMessage(StrictModel):
    """A message to a thread: delivered to its running run, or the task of its next run."""

    text: str = Field(min_length=1)
    #: resending the same id is a no-op for a run that has it
    id: str | None = Field(default=None, max_length=200)
    #: the next run's agent definition (else the previous run's spec, else the defaults)
    agent: str | None = None


async def _owned(runs: Tenancy, thread: str, principal: Principal) -> str | None:
    """The thread's workflow id; None when it has no run yet; 404 when another tenant's."""
    try:
        workflow_id = thread_workflow_id(thread, principal.tenant)
    except ThreadError:
        raise not_found(thread) from None
    try:
        await runs.client.describe(workflow_id)
    except RunNotFoundError:
        return None
    await runs.owned(workflow_id, principal)
    return workflow_id


@router.post("/threads/{thread}/messages", response_model=Sent)
async def send_to_thread(
    thread: ThreadPath,
    body: ThreadMessage,
    runs: Runs,
    principal: Annotated[Principal, Depends(writer(Scope.STEER))],
) -> Sent:
    """`capstan send --thread THREAD TEXT`: delivered to the running run, or it starts the
    thread's next run, which goes on from the previous run's conversation."""
    await _owned(runs, thread, principal)
    spec = None
    if body.agent is not None:
        agents = runs.client.settings.agents_file
        spec = admitted(from_agent(RunSpec(task=body.text, agent=body.agent), agents), principal)
    threads = Threads(runs.client)
    try:
        sent = await threads.send(
            thread,
            body.text,
            spec,
            body.id,
            tenant=principal.tenant,
            scopes=principal.scopes,  # else the previous run's spec, narrowed to the sender's
            identity=principal.identity,
            **await runs.ownership(principal),
        )
    except ThreadError as exc:
        raise ApiError(422, "invalid", str(exc), field="path.thread") from None
    except CapstanError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return sent.model_copy(update={"thread": thread})


@router.get("/threads/{thread}", response_model=list[ThreadRun])
async def list_thread_runs(
    thread: ThreadPath, runs: Runs, principal: Annotated[Principal, Depends(require(Scope.READ))]
) -> list[ThreadRun]:
    """`capstan thread show THREAD --json`: its runs, oldest first."""
    if await _owned(runs, thread, principal) is None:
        raise not_found(thread)
    return await Threads(runs.client).runs(thread, principal.tenant)

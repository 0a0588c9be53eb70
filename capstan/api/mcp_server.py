"""Durable runs as MCP tools, for any model client that speaks MCP: `capstan mcp` over stdio,
and `capstan serve` at `/mcp` over streamable HTTP (`capstan.api.mcp_http`).

A model client (Claude Desktop, an IDE, another agent) starts a run, follows it, and decides
its approvals and questions as tool calls; a run's audit is a resource. The runs are ordinary
Capstan runs: they survive the client going away, and a person may decide them from the CLI or
the inbox as well. Who the caller is and which runs it reaches is `capstan.api.mcp_access`: the
operator over stdio, a token's tenant over HTTP.

`review` asks a person instead of the model: where the client supports elicitation (a form the
client shows its user), the open approval request, with the exact arguments, is put to the
user, and the answer is sent as the decision, bound to the hash of those arguments. Clients
on MCP 2026-07-28 get it as an input-required round trip, older ones as an
`elicitation/create` request: the SDK's resolvers pick the way.

Every failure a caller can cause (an unknown run, no such request, an input the run refuses,
a missing scope) is an MCP tool error whose text is one line, never a traceback.

    capstan mcp        # then, in the client's config: {"command": "capstan", "args": ["mcp"]}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Annotated, Any, Literal

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from capstan.api.auth import Scope
from capstan.api.errors import ApiError
from capstan.api.mcp_access import OperatorAccess, RunAccess
from capstan.audit.history import load_histories
from capstan.audit.render import render_trail
from capstan.audit.trail import build_trail
from capstan.audit.tree import tree_entries
from capstan.client.runs import CapstanClient, RunNotFoundError
from capstan.core.errors import CapstanError, SteeringError, StoreError
from capstan.core.spec import RunSpec
from capstan.core.steering import ApprovalRequest, pick_request

__all__ = ["INSTRUCTIONS", "AccessFor", "RunServer", "Verdict", "build_server", "stdio_server"]

INSTRUCTIONS = (
    "Durable agent runs on Capstan. start_run returns a run id at once; the run goes on whether "
    "or not you stay. Poll run_status or wait in run_result; when a run waits for approval or "
    "an answer, pending lists the requests; approve, deny and answer decide them, and review "
    "asks your user to decide an approval."
)
log = logging.getLogger("capstan.api")

#: the longest a `run_result` call waits for the run's end (seconds)
MAX_WAIT = 300.0
#: the longest arguments a review form shows; a longer call is not put to a form at all (a
#: user must never approve what was cut off): read it with `pending`, decide with its hash
SHOWN_ARGUMENTS = 8_000

#: the runs and writes a tool call's caller may reach, from the call's context
AccessFor = Callable[[Context], Awaitable[RunAccess]]


class Verdict(BaseModel):
    """What the user answers in a review form."""

    decision: Literal["approve", "deny"] = Field(description="run the call, or refuse it")
    reason: str = Field("", description="why (a denial's reason is what the run's model reads)")


class _Failed(ToolError):
    """A caller's mistake, as one line."""

    def __init__(self, exc: Exception) -> None:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        super().__init__(text)


@asynccontextmanager
async def _caller_errors() -> AsyncIterator[None]:
    """Errors a caller can cause become one-line tool errors; anything else stays a bug."""
    try:
        yield
    except StoreError:  # its text names the store's root: the server log has it
        log.exception("an MCP tool could not read the content store")
        raise ToolError("the content store could not be read") from None
    except (CapstanError, ApiError, ValueError) as exc:
        raise _Failed(exc) from None


class RunServer(MCPServer):
    """An MCP server of run tools; `access_for` says which runs each call reaches."""

    def __init__(self, access_for: AccessFor, name: str = "capstan") -> None:
        super().__init__(name=name, instructions=INSTRUCTIONS)
        self.access_for = access_for


async def _access(ctx: Context) -> RunAccess:
    server = ctx.mcp_server
    assert isinstance(server, RunServer)
    return await server.access_for(ctx)


async def start_run(
    task: str,
    ctx: Context,
    agent: str | None = None,
    model: str | None = None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Start a durable agent run on `task` (with an agent definition of the server's, or a
    model profile) and return its id at once."""
    fields = {"model": model, "max_steps": max_steps, "agent": agent}
    async with _caller_errors():
        spec = RunSpec(task=task, **{k: v for k, v in fields.items() if v is not None})
        return {"run_id": await (await _access(ctx)).start(spec)}


async def run_status(run_id: str, ctx: Context) -> dict[str, Any]:
    """Phase, step, what the run waits for, and its output once it has ended."""
    async with _caller_errors():
        access = await _access(ctx)
        await access.reach(run_id, Scope.READ)
        client = access.client
        view: dict[str, Any] = client.status_view(await client.status(run_id)).model_dump(
            mode="json"
        )
        return view


async def run_result(run_id: str, ctx: Context, wait_seconds: float = 0.0) -> dict[str, Any]:
    """The run's result once it has ended (waiting up to `wait_seconds`, at most 300);
    `{"ended": false, ...its status}` while it goes on."""
    async with _caller_errors():
        access = await _access(ctx)
        await access.reach(run_id, Scope.READ)
        client = access.client
        try:
            async with asyncio.timeout(max(0.001, min(wait_seconds, MAX_WAIT))):
                result = await client.result(run_id)
        except TimeoutError:
            status = client.status_view(await client.status(run_id)).model_dump(mode="json")
            return {"ended": False, **status}
        shown: dict[str, Any] = result.model_dump(mode="json", exclude={"tail", "conversation"})
        shown["output"] = client.output_data(result)
        return {"ended": True, **shown}


async def pending(run_id: str, ctx: Context) -> dict[str, Any]:
    """The run's open approval requests and questions."""
    async with _caller_errors():
        access = await _access(ctx)
        await access.reach(run_id, Scope.READ)
        shown: dict[str, Any] = (await access.client.pending(run_id)).model_dump(mode="json")
        return shown


async def approve(
    run_id: str,
    ctx: Context,
    request_id: str | None = None,
    reason: str = "",
    args_hash: str | None = None,
) -> str:
    """Approve a tool call the run waits on (the only open one when `request_id` is not
    given). `args_hash` (from `pending`) binds the approval to the arguments you read: the
    run refuses it for any other call."""
    async with _caller_errors():
        await (await _access(ctx)).decide(run_id, "approve", request_id, args_hash, reason)
    return "approved"


async def deny(
    run_id: str,
    reason: str,
    ctx: Context,
    request_id: str | None = None,
    args_hash: str | None = None,
) -> str:
    """Deny a tool call; `reason` is what the run's model is told."""
    async with _caller_errors():
        await (await _access(ctx)).decide(run_id, "deny", request_id, args_hash, reason)
    return "denied"


async def answer(run_id: str, request_id: str, text: str, ctx: Context) -> str:
    """Answer a question the run's agent asked (`ask_user`)."""
    async with _caller_errors():
        await (await _access(ctx)).answer(run_id, request_id, text)
    return "answered"


async def send_message(run_id: str, text: str, ctx: Context) -> str:
    """A message the run's model reads at its next step, in order."""
    async with _caller_errors():
        await (await _access(ctx)).send(run_id, text)
    return "sent"


async def open_request(run_id: str, ctx: Context, request_id: str | None = None) -> ApprovalRequest:
    """The approval request `review` puts to the user: the named one, or the only one."""
    async with _caller_errors():
        access = await _access(ctx)
        await access.reach(run_id, Scope.APPROVE)
        approvals = (await access.client.pending(run_id)).approvals
    try:
        return pick_request(approvals, request_id, run_id, "review")
    except SteeringError as exc:
        raise ToolError(str(exc)) from exc


async def ask_user(
    run_id: str, ctx: Context, request: Annotated[ApprovalRequest, Resolve(open_request)]
) -> Elicit[Verdict]:
    """The form: the call, its exact arguments, and why it waits."""
    content = (await _access(ctx)).client.content()
    arguments = await asyncio.to_thread(content.resolve, request.arguments)
    with contextlib.suppress(ValueError):  # else shown as the model wrote it
        arguments = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    if len(arguments) > SHOWN_ARGUMENTS:
        raise ToolError(
            f"the call's arguments are {len(arguments)} characters, too long for a form: read "
            f"them with pending and decide with approve or deny and args_hash"
        )
    return Elicit(_question(run_id, request, arguments), Verdict)


async def review(
    run_id: str,
    ctx: Context,
    request: Annotated[ApprovalRequest, Resolve(open_request)],
    verdict: Annotated[ElicitationResult[Verdict], Resolve(ask_user)],
    request_id: str | None = None,
) -> str:
    """Ask your user to approve or deny the tool call the run waits on (the only open one
    when `request_id` is not given), and send their decision. Needs a client that
    supports elicitation."""
    if not isinstance(verdict, AcceptedElicitation):
        return f"not decided: the user chose {verdict.action}; the request stays open"
    choice = verdict.data
    reason = choice.reason or ("denied by the user" if choice.decision == "deny" else "")
    async with _caller_errors():
        access = await _access(ctx)
        await access.decide(run_id, choice.decision, request.request_id, request.args_hash, reason)
    return "approved" if choice.decision == "approve" else "denied"


async def audit(run_id: str, ctx: Context) -> str:
    """Everything the run saw and did, as a verified trail (Markdown). An unknown run (or
    another tenant's) is the protocol's "resource not found"; a missing scope, its error."""
    try:
        access = await _access(ctx)
        await access.reach(run_id, Scope.READ)
    except RunNotFoundError as exc:
        raise ResourceNotFoundError(str(exc)) from None
    except ApiError as exc:
        error = ResourceNotFoundError if exc.status == HTTPStatus.NOT_FOUND else ResourceError
        raise error(str(exc).splitlines()[0]) from None
    except CapstanError as exc:
        raise ResourceError(str(exc).splitlines()[0]) from None
    client: CapstanClient = access.client
    histories = await load_histories(client.client, run_id)
    if not histories:
        raise ResourceNotFoundError(f"no run {run_id!r}")
    entries = await tree_entries(client.client, histories)
    records, issues = build_trail(entries, client.content())
    return render_trail(records, issues, "md")


_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def build_server(access_for: AccessFor, *, name: str = "capstan") -> RunServer:
    """The MCP server: the run tools and the audit resource over `access_for`."""
    server = RunServer(access_for, name)
    reads: list[Callable[..., Awaitable[Any]]] = [run_status, run_result, pending]
    writes: list[Callable[..., Awaitable[Any]]] = [
        start_run,
        approve,
        deny,
        answer,
        send_message,
        review,
    ]
    for tool in reads:
        server.add_tool(tool, annotations=_READS)
    for tool in writes:
        server.add_tool(tool, annotations=_WRITES)
    server.resource("capstan://runs/{run_id}/audit", name="audit", mime_type="text/markdown")(audit)
    return server


def _question(run_id: str, request: ApprovalRequest, arguments: str) -> str:
    why = f"\nWhy it waits: {request.reason}" if request.reason else ""
    return (
        f"Run {run_id} asks to call {request.tool} (request {request.request_id}) with:\n"
        f"{arguments}{why}\nApprove or deny?"
    )


def stdio_server(client: CapstanClient) -> RunServer:
    """`capstan mcp`: the operator's server over stdio."""
    operator = OperatorAccess(client)

    async def access_for(ctx: Context) -> RunAccess:
        return operator

    return build_server(access_for)

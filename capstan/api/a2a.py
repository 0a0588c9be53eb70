"""A2A (Agent2Agent): every agent definition of the server (`CAPSTAN_AGENTS`) as an A2A agent
that other agents call, on a2a-sdk's JSON-RPC binding (A2A 1.0 with `A2A-Version: 1.0`, and
the 0.3 method names such as `message/send` at the same URL).

    GET  /a2a/{agent}/.well-known/agent-card.json     the agent card (`capstan.api.a2a_card`)
    POST /a2a/{agent}/                                JSON-RPC: SendMessage, GetTask, ...

    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"})  # a2a-sdk's client:
    agent = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
        f"{base}/a2a/researcher/"
    )

Who calls: the REST API's bearer tokens, scopes and tenants. No token, or a bad one: 401 with
`WWW-Authenticate: Bearer`, before anything else (the card too: it is read with `read`).
A method the token's scopes cannot reach is a 403 before it is parsed: reads (`GetTask`,
`SubscribeToTask`) need `read`, `CancelTask` needs `steer`, a message needs `steer` or
`approve` (which of them, the message decides: below). Messages and cancels count against the
token's write limit (429). An unknown agent is a 404 in the API's JSON shape.

Tasks are Capstan runs, read from Temporal each time (no task store), and a context is a
thread (`capstan.api.a2a_tasks`): the tasks of a context are the runs of the thread, each going
on from the conversation of the one before. A task's id is its run id, with the first Temporal
execution of the run for a thread's runs, which share one run id (`<run id>~<execution>`).
A message:

- with no `taskId` starts a run of the URL's agent in its `contextId`'s thread (a new context
  when it has none), or, while a run of that thread is going, goes to that run as a live
  message; with `steer` (`POST /api/threads/{context}/messages`);
- with the `taskId` of a task in `input-required` carries the decision of the request it waits
  on: `approve` / `deny, and why` in words when one request is open, or a data part
  `{"decision": "approve"|"deny"|"always", "request_id", "reason", "arguments"}` /
  `{"answer", "request_id"}` (`capstan.api.a2a_input`); with `approve`, in the token's name,
  bound to the hash of the arguments the task showed;
- with the `taskId` of a task that is `working` is a live message for its model (`steer`);
- with the `taskId` of a task that has ended is refused: send to its context instead.

States: `working` while the run goes on, `input-required` while it waits on an approval or a
question (the status message lists them, as text and as data), then `completed`, `canceled`
or `failed` from the run's terminal reason; the run's output is the task's `output` artifact.
`SendMessage` answers once the task has ended or needs input (at most a minute, then as it
is; at once with `returnImmediately`). `SendStreamingMessage` and `SubscribeToTask` send the
task (`submitted` when the message started its run, else as it is), a `working` status per
step of the run (its model replies, tool calls, messages; the run's event in the metadata),
then `input-required`, or the output artifact and the final status. `CancelTask` asks the run
to end (`cancelled`) and answers once it has (at most ten seconds).

Push notifications are not offered (`PushNotificationNotSupportedError`, and the card says
so): Capstan's webhooks (`CAPSTAN_WEBHOOKS`) are the worker's own, fixed in its configuration
with their secrets, and post opened requests only; A2A's are per task, registered by any
caller with a URL and token of its choosing, and posted on every change. Holding those needs
a store Capstan does not have (Temporal is its only durability, and a caller's URL and token
must not enter a run's history). Follow a task with a stream, or poll `GetTask`.

Bad input of any kind (not JSON, not JSON-RPC, an unknown method, bad params, an unknown or
another tenant's task, a decision for a request that is not open) is the protocol's own
JSON-RPC error, never a traceback or a 5xx (`capstan.api.a2a_errors`).
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Annotated
from urllib.parse import quote

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from capstan.api.a2a_card import agent_card
from capstan.api.a2a_handler import CALLER, Caller, RunsHandler
from capstan.api.auth import Principal, Scope, authenticate, require
from capstan.api.backend import WriteLimiter
from capstan.api.errors import ApiError
from capstan.client.agents import AgentsError, load_agents, resolve_agent
from capstan.core.spec import RunSpec

__all__ = ["CARD_PATH", "mount"]

CARD_PATH = ".well-known/agent-card.json"
#: methods that read (A2A 1.0 and 0.3 names)
_READS = frozenset(
    {
        "GetTask",
        "tasks/get",
        "SubscribeToTask",
        "tasks/resubscribe",
        "ListTasks",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
        "GetExtendedAgentCard",
        "agent/getAuthenticatedExtendedCard",
    }
)
#: messages: `steer` to start or talk, `approve` to decide (the handler tells which)
_MESSAGES = frozenset({"SendMessage", "SendStreamingMessage", "message/send", "message/stream"})
_STEERS = frozenset(
    {
        "CancelTask",
        "tasks/cancel",
        "CreateTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/delete",
    }
)
#: the 0.3 names among them (`message/send`); a 1.0 client never sends them
_V03 = frozenset(m for m in _READS | _MESSAGES | _STEERS if "/" in m)
_bearer = HTTPBearer(auto_error=False, description="a token from the server's tokens file")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
Reader = Annotated[Principal, Depends(require(Scope.READ))]


def _capstan_version() -> str:
    try:
        return importlib.metadata.version("capstan")
    except importlib.metadata.PackageNotFoundError:
        return "0"


class _CallContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller the route authenticated."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.state.a2a_caller
        return context


def _definition(request: Request, agent: str) -> RunSpec:
    """Agent `agent` of the server, resolved as a run of it would be; 404 when there is none."""
    agents_file = request.app.state.backend.settings.agents_file
    if agents_file is None:
        raise ApiError(404, "agent_not_found", "this server has no agent definitions")
    try:
        if agent not in load_agents(agents_file):
            raise ApiError(404, "agent_not_found", f"no agent {agent!r} on this server")
        return resolve_agent(agents_file, agent, "(the agent card)")
    except AgentsError as exc:
        message = str(exc).replace(f"{agents_file}: ", "")  # no server paths in answers
        raise ApiError(422, "invalid", message, field="path.agent") from None


class _TooDeep(Exception):
    """A body nested deeper than a parser's recursion allows."""


async def _call(request: Request) -> tuple[object, str | None]:
    """The JSON-RPC id and method the body names (None: the dispatcher answers what is
    wrong)."""
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        return None, None
    except RecursionError:  # nested past any use: the dispatcher's parser would fail the same way
        raise _TooDeep from None
    if not isinstance(body, dict):
        return None, None
    method = body.get("method")
    return body.get("id"), method if isinstance(method, str) else None


def _version_clash(request: Request, call_id: object, method: str | None) -> Response | None:
    """A 0.3 method name (`message/send`) with `A2A-Version: 1.x`: the protocol's invalid
    request, naming the clash. The SDK's 0.3 adapter would answer it as an internal error
    (-32603), since 0.3 has no version error."""
    version = request.headers.get("a2a-version", "")
    if method not in _V03 or not version or version.startswith("0."):
        return None
    message = f"{method!r} is an A2A 0.3 method; with A2A-Version {version} use the 1.0 names"
    error = {"code": -32600, "message": message}
    return JSONResponse(
        {"jsonrpc": "2.0", "id": call_id if _is_id(call_id) else None, "error": error}
    )


def _is_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _admit(request: Request, principal: Principal, method: str | None) -> None:
    """The method's scope (403), and the write limit for writes (429)."""
    if method in _READS and not principal.may(Scope.READ):
        raise ApiError(403, "forbidden", "this token lacks the 'read' scope")
    if method in _STEERS and not principal.may(Scope.STEER):
        raise ApiError(403, "forbidden", "this token lacks the 'steer' scope")
    if method in _MESSAGES and not (principal.may(Scope.STEER) or principal.may(Scope.APPROVE)):
        raise ApiError(
            403,
            "forbidden",
            "this token lacks the 'steer' scope (and 'approve', to decide a task's requests)",
        )
    if method in _MESSAGES | _STEERS:
        limiter: WriteLimiter = request.app.state.limiter
        limiter.take(principal)


def _router(dispatcher: JsonRpcDispatcher) -> APIRouter:
    router = APIRouter(prefix="/a2a/{agent}", include_in_schema=False)

    @router.get(f"/{CARD_PATH}")
    async def agent_card_route(agent: str, request: Request, principal: Reader) -> JSONResponse:
        spec = _definition(request, agent)
        base = request.app.state.backend.settings.inbox_url or str(request.base_url)
        url = f"{base.rstrip('/')}/a2a/{quote(agent, safe='')}/"
        card = agent_card(agent, spec, url, _capstan_version())
        return JSONResponse(agent_card_to_dict(card))

    @router.post("/")
    async def json_rpc(agent: str, request: Request, credentials: Credentials) -> Response:
        principal = authenticate(request, credentials)  # 401 before anything is read
        _definition(request, agent)
        try:
            call_id, method = await _call(request)
        except _TooDeep:
            error = {"code": -32700, "message": "the body nests too deeply to parse"}
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": error})
        _admit(request, principal, method)
        clash = _version_clash(request, call_id, method)
        if clash is not None:
            return clash
        request.state.a2a_caller = Caller(principal, agent)
        return await dispatcher.handle_requests(request)

    return router


def mount(app: FastAPI) -> None:
    """Adds this protocol's routes to `capstan serve`'s app."""
    handler = RunsHandler(app.state.backend, app.state.api)
    dispatcher = JsonRpcDispatcher(handler, context_builder=_CallContext(), enable_v0_3_compat=True)
    app.include_router(_router(dispatcher))

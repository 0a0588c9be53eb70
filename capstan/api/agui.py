"""AG-UI on `capstan serve`: a chat frontend drives durable Capstan runs over the protocol.

    POST /agui            a run with the thread's spec (its previous run's, else the defaults)
    POST /agui/{agent}    a run of the server's agent definition `agent` (`CAPSTAN_AGENTS`)

The body is AG-UI's `RunAgentInput`; the answer is AG-UI events as Server-Sent Events, with the
same bearer tokens, scopes, tenants and write limit as the REST API (`steer`; answering an
interrupt also needs `approve`). Bad input is a 4xx JSON error in the API's shape before the
stream starts; once it has, a problem is one RUN_ERROR line.

**Threads and runs.** AG-UI's `threadId` is a Capstan thread of the caller's tenant (`capstan
.api.thread_routes`: another tenant's thread is unknown). The request's new user message (the
last message, when it is the user's) goes to the thread as `capstan send --thread` does: to
its running run, or as the task of its next run, which goes on from the previous run's
conversation. It travels with its AG-UI message id as the input id, so a request sent twice
delivers it once. AG-UI's `runId` names one request and its response (RUN_STARTED and
RUN_FINISHED echo it); the Capstan run (the thread's workflow id) is named in RUN_STARTED's
`metadata.capstan.run_id`. A request without a new user message attaches to the thread's
latest run.

**Events** (`agui_events`): each step is STEP_STARTED/STEP_FINISHED `step N`; the model's reply
a text message (streamed while the call is in flight, completed from history) followed by its
tool calls (TOOL_CALL_START/ARGS/END, `parentMessageId` the reply); a tool's output, a denial
or an answer a TOOL_CALL_RESULT; the run's answer a last text message. The user's own messages
are the client's and are not sent back.

**Interrupts** (`agui_input`): an approval request or a question the run waits for ends the
response with RUN_FINISHED, outcome `interrupt`, one interrupt per request (id: the request
id; `toolCallId`: the call it is about; `responseSchema`: the answer it takes). The next request
(same `threadId`, a new `runId`) answers in `resume`: each entry is checked (a request that is
not open is a 409, a bad answer a 422, edited arguments are checked against the tool) and sent
as the REST API sends a decision or an answer, then the stream goes on where it stopped.

**Reconnecting** (`agui_cursor`): every durable event carries an SSE id (`TAG.N`: the N-th
event of the Capstan run `TAG`). A dropped client sends the same request again (or any request
on the thread): it re-attaches to the run and resumes after the events it has, read from
`Last-Event-ID` when sent, else from the messages it sends (what `@ag-ui/client` does). It
re-opens what is open there and continues: nothing lost, nothing added twice to its messages.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Any

from ag_ui.core import RunAgentInput
from fastapi import APIRouter, Depends, FastAPI, Header, Path, Request
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus

from capstan.api.agui_cursor import Cursor, parse_event_id
from capstan.api.agui_events import OpenRequest, chain_key
from capstan.api.agui_input import (
    MAX_RESUME,
    UserText,
    answer_for,
    input_id,
    interrupt_id,
    parse_input,
    user_text,
)
from capstan.api.agui_stream import Attach, agui_stream
from capstan.api.auth import Principal, Scope
from capstan.api.backend import api_settings, tenancy, writer
from capstan.api.edits import edit_problem
from capstan.api.errors import ERROR_RESPONSES, ApiError, not_found
from capstan.api.routes import EventStreamResponse, admitted
from capstan.api.steer_routes import UPDATE_TIMEOUT
from capstan.api.tenancy import Tenancy
from capstan.audit.history import decode_history, first_run_id, load_histories
from capstan.client.agents import AgentsError, resolve_agent
from capstan.client.runs import CapstanError, RunNotFoundError
from capstan.client.threads import ThreadError, Threads, thread_workflow_id
from capstan.core.spec import RunSpec
from capstan.core.steering import Answer, ApprovalRequest, Decision
from capstan.runtime.api_settings import ApiSettings

__all__ = ["mount", "router"]

router = APIRouter(responses=ERROR_RESPONSES, tags=["agui"])
Runs = Annotated[Tenancy, Depends(tenancy)]
Sender = Annotated[Principal, Depends(writer(Scope.STEER))]
Api = Annotated[ApiSettings, Depends(api_settings)]
AgentPath = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
LastEventId = Annotated[str | None, Header(max_length=20)]

_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "AG-UI's RunAgentInput (https://docs.ag-ui.com): the conversation so far, "
    "the new user message last, and `resume`: answers to the interrupts that ended the "
    "thread's previous response.",
    "required": ["threadId", "runId", "messages"],
    "properties": {
        "threadId": {"type": "string", "description": "a Capstan thread of your tenant"},
        "runId": {"type": "string", "description": "names this request and its response"},
        "messages": {
            "type": "array",
            "items": {"type": "object", "description": "an AG-UI message"},
        },
        "resume": {
            "type": "array",
            "items": {"type": "object", "description": "an AG-UI resume entry"},
        },
    },
}
_OPENAPI = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}
}
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events: RUN_STARTED, the run's events, "
        "then RUN_FINISHED (success, cancelled or interrupt) or RUN_ERROR"
    }
}


def mount(app: FastAPI) -> None:
    """Adds this protocol's routes to `capstan serve`'s app."""
    app.include_router(router)


@router.post("/agui", response_class=EventStreamResponse, openapi_extra=_OPENAPI, responses=_STREAM)
async def agui_run(
    request: Request, runs: Runs, principal: Sender, api: Api, last_event_id: LastEventId = None
) -> EventStreamResponse:
    """AG-UI on a thread: the new user message goes to the thread's running run or starts its
    next one (with the thread's spec, else the defaults); `resume` answers the interrupts
    that ended the previous response; the answer streams the run's events from where the
    client is (`Last-Event-ID`, else the messages it sends) until it ends or waits."""
    call = _Call(runs, principal, parse_input(await request.body()), None)
    return await call.respond(api, last_event_id)


@router.post(
    "/agui/{agent}", response_class=EventStreamResponse, openapi_extra=_OPENAPI, responses=_STREAM
)
async def agui_run_agent(
    *,
    agent: AgentPath,
    request: Request,
    runs: Runs,
    principal: Sender,
    api: Api,
    last_event_id: LastEventId = None,
) -> EventStreamResponse:
    """AG-UI on a thread, as `POST /agui`; the runs it starts are the server's agent
    definition `agent` (`CAPSTAN_AGENTS`)."""
    call = _Call(runs, principal, parse_input(await request.body()), agent)
    return await call.respond(api, last_event_id)


class _Call:
    """One AG-UI request, checked and carried out up to its stream."""

    def __init__(
        self, runs: Tenancy, principal: Principal, body: RunAgentInput, agent: str | None
    ) -> None:
        self.runs, self.client, self.principal, self.body = runs, runs.client, principal, body
        self._input_ids: set[str] | None = None
        self.text = user_text(body)
        self.spec = _agent_spec(self.client.settings.agents_file, agent, self.text, principal)
        if body.resume and not principal.may(Scope.APPROVE):
            raise ApiError(403, "forbidden", "answering an interrupt needs the 'approve' scope")
        try:
            self.workflow_id = thread_workflow_id(body.thread_id, principal.tenant)
        except ThreadError as exc:
            raise ApiError(422, "invalid", str(exc), field="body.threadId") from None

    async def respond(self, api: ApiSettings, last_event_id: str | None) -> EventStreamResponse:
        latest = await self.latest()
        decided = await self.settle(latest) if self.body.resume else set()
        first, fresh = await self.send(latest)
        if first is None:
            first = await first_run_id(self.client.client, self.workflow_id)
        if first is None:
            raise not_found(self.body.thread_id)
        plan = Attach(
            workflow_id=self.workflow_id,
            first_execution=first,
            thread_id=self.body.thread_id,
            run_id=self.body.run_id,
            messages=tuple(self.body.messages),
            cursor=_cursor(last_event_id, chain_key(first)[:6]),
            fresh=fresh,
            decided=frozenset(decided),
            poll_seconds=api.stream_poll_seconds,
            live_seconds=api.live_text_seconds,
        )
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return EventStreamResponse(agui_stream(self.client, plan), headers=headers)

    async def latest(self) -> WorkflowExecutionDescription | None:
        """The thread's latest execution; None before its first run; 404: another tenant's."""
        try:
            await self.client.describe(self.workflow_id)
        except RunNotFoundError:
            return None
        try:
            return await self.runs.owned(self.workflow_id, self.principal)
        except ApiError as exc:  # answered as an unknown thread is, word for word
            if exc.status == 404:
                raise not_found(self.body.thread_id) from None
            raise

    async def send(self, latest: WorkflowExecutionDescription | None) -> tuple[str | None, bool]:
        """Deliver the new user message, unless the thread's latest run already took it; the
        first execution of the run it started (None when none), and whether it started one."""
        text = self.text
        if text is None:
            return None, False
        ended = latest is not None and latest.status != WorkflowExecutionStatus.RUNNING
        if ended and latest and text.id in await self.input_ids():
            return None, False  # sent again: the run that took it is the one to attach to
        try:
            sent = await Threads(self.client).send(
                self.body.thread_id,
                text.text,
                self.spec,
                text.id,
                tenant=self.principal.tenant,
                scopes=self.principal.scopes,
                identity=self.principal.identity,
                **await self.runs.ownership(self.principal),
            )
        except ThreadError as exc:
            raise ApiError(422, "invalid", str(exc), field="body.threadId") from None
        except CapstanError as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return (sent.execution, True) if sent.started else (None, False)

    async def input_ids(self) -> set[str]:
        """The ids of the steering inputs the thread's latest run took, in every execution of
        its chain (a message may have reached any of them): read once per request."""
        if self._input_ids is None:
            histories = await load_histories(self.client.client, self.workflow_id)
            entries = [e for history in histories for e in decode_history(history)]
            self._input_ids = {
                e.data.id
                for e in entries
                if e.kind in ("signal", "update") and isinstance(getattr(e.data, "id", None), str)
            }
        return self._input_ids

    async def settle(self, latest: WorkflowExecutionDescription | None) -> set[str]:
        """Send the answers of `resume`, every one checked before any is sent; the requests
        they settle. An answer this request sent before is passed over (it is sent again)."""
        if latest is None:
            raise not_found(self.body.thread_id)
        waiting: list[OpenRequest] = []
        if latest.status == WorkflowExecutionStatus.RUNNING:
            view = await self.client.pending(self.workflow_id)
            waiting = [*view.approvals, *view.questions]
        open_requests = {interrupt_id(r): r for r in waiting}
        resume = self.body.resume or []
        if len(resume) > MAX_RESUME:
            problem = f"at most {MAX_RESUME} answers a request"
            raise ApiError(422, "invalid", problem, field="body.resume")
        answers: list[Decision | Answer] = []
        seen: set[str] = set()
        for n, entry in enumerate(resume):
            if entry.interrupt_id in seen:
                problem = f"interrupt {entry.interrupt_id!r} is answered twice"
                raise ApiError(422, "invalid", problem, field=f"body.resume.{n}.interruptId")
            seen.add(entry.interrupt_id)
            request = open_requests.get(entry.interrupt_id)
            if request is None:
                self.check_taken(entry.interrupt_id, await self.input_ids())
                continue
            answer = answer_for(entry, request, f"body.resume.{n}", self.body.run_id)
            if isinstance(request, ApprovalRequest) and isinstance(answer, Decision):
                await self.check_edit(request, answer, f"body.resume.{n}")
            answers.append(answer.model_copy(update={"identity": self.principal.identity}))
        checked = await self.client.workers_polling()
        for answer in answers:
            target = await self.client.owner(self.workflow_id, answer.request_id)
            await self.client.steer(target, answer, checked, update_timeout=UPDATE_TIMEOUT)
        return {a.request_id for a in answers}

    def check_taken(self, interrupt_id: str, taken: set[str]) -> None:
        """Nothing when this request's answer to `interrupt_id` was sent before (the same
        request again: its input id is among `taken`); 409 otherwise: the request is not
        open."""
        if input_id(self.body.run_id, interrupt_id) not in taken:
            problem = f"no open request {interrupt_id!r} on thread {self.body.thread_id!r}"
            raise ApiError(409, "conflict", problem)

    async def check_edit(self, request: ApprovalRequest, decision: Decision, where: str) -> None:
        if decision.arguments is None:
            return
        owner = await self.client.owner(self.workflow_id, request.request_id)
        problem = await edit_problem(self.client, owner, request.tool, str(decision.arguments))
        if problem is not None:
            raise ApiError(422, "invalid", problem, field=f"{where}.payload.arguments")


def _agent_spec(
    agents_file: FilePath | None, agent: str | None, text: UserText | None, principal: Principal
) -> RunSpec | None:
    """The spec of the run a request would start with `agent` (checked on every request, so
    an unknown agent is refused alike whether or not a run starts)."""
    if agent is None:
        return None
    if agents_file is None:
        raise ApiError(422, "invalid", "this server has no agent definitions", field="path.agent")
    try:
        spec = resolve_agent(agents_file, agent, text.text if text else "(check)")
    except AgentsError as exc:
        message = str(exc).replace(f"{agents_file}: ", "")  # no server paths in answers
        raise ApiError(422, "invalid", message, field="path.agent") from None
    return admitted(spec, principal)


def _cursor(raw: str | None, tag: str) -> Cursor | None:
    if raw is None:
        return None
    try:
        return parse_event_id(raw, tag)
    except ValueError as exc:
        raise ApiError(422, "invalid", str(exc), field="header.last-event-id") from None

"""A tenant's runs as A2A tasks: find a task's run, read it as a `Task`, follow it as stream
events, start or continue a context, and deliver a message, a decision or a cancel to it.

The REST API's own paths, so the two cannot drift: runs are reached only through `Tenancy`
(another tenant's run is an unknown task), a context's runs start as
`POST /api/threads/{thread}/messages` starts them (`Threads.send` with the tenant's ownership,
the agent definition through `admitted`, privileges narrowed to the token's scopes), decisions
go as `POST /api/runs/{id}/approve|deny|answer` send them (bound to the hash of the arguments
the reviewer was shown, by validated update while a worker polls). Nothing is kept here: a
task is read from Temporal each time.

Following a task is the SSE stream's machinery (`HistoryFollower`, `ChainEvents`): long polls
on the run's history from the first execution of its chain, each new step as a `working`
status, then `input-required` when the run opens a request, or the output artifact and the
final status when it ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime

from a2a.server.events import Event
from a2a.types import Task
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError, RPCStatusCode

from capstan.api.a2a_input import Decide, Reply, Said, verdict
from capstan.api.a2a_tasks import (
    ANNOUNCING,
    INTERRUPTED,
    TERMINAL,
    Ending,
    TaskRef,
    artifact_update,
    asks,
    context_of,
    ended_task,
    progress_update,
    running_task,
    status_update,
    submitted_task,
)
from capstan.api.auth import Principal, Scope
from capstan.api.edits import edit_problem
from capstan.api.errors import ApiError
from capstan.api.routes import admitted, from_agent
from capstan.api.stream import ChainEvents
from capstan.api.tenancy import Tenancy, tenant_of
from capstan.audit.follow import HistoryFollower
from capstan.client.runs import CapstanClient
from capstan.client.threads import Threads, thread_workflow_id
from capstan.core.spec import RunResult, RunSpec
from capstan.core.steering import Answer, CancelRequest, Decision, LiveMessage, SteeringBase

__all__ = ["UPDATE_TIMEOUT", "Located", "TaskRuns"]

#: how long a validated decision waits for a worker before it goes as a signal (seconds)
UPDATE_TIMEOUT = 10.0
#: how long reading an ended run's result may take (seconds)
_RESULT_WAIT = 10.0


@dataclass(frozen=True)
class Located:
    """A task's run: its ref, its context, the first execution of its chain, whether it is
    still going (and is its thread's current run), and when it closed, if that is known."""

    ref: TaskRef
    context: str
    chain: str
    running: bool
    closed: datetime | None = None


def _first_execution(desc: WorkflowExecutionDescription) -> str:
    return desc.raw_description.workflow_execution_info.first_run_id or desc.run_id


def _now() -> datetime:
    return datetime.now(UTC)


class TaskRuns:
    """A2A tasks as one principal reaches them."""

    def __init__(self, runs: Tenancy, principal: Principal, wait: float) -> None:
        self.runs = runs
        self.principal = principal
        self.wait = wait  # how long one history long poll waits (seconds)

    @property
    def client(self) -> CapstanClient:
        return self.runs.client

    async def _owned(self, workflow_id: str) -> WorkflowExecutionDescription:
        try:
            return await self.runs.owned(workflow_id, self.principal)
        except ApiError as exc:
            if exc.status == 404:
                raise TaskNotFoundError(f"no task with run {workflow_id!r}") from None
            raise

    async def locate(self, task_id: str) -> Located:
        """The principal's task `task_id`; TaskNotFoundError for any other id."""
        ref = TaskRef.parse(task_id)
        if ref is None:
            raise TaskNotFoundError(f"no task {task_id!r}")
        desc = await self._owned(ref.workflow_id)
        context = context_of(ref.workflow_id, self.principal.tenant)
        first = _first_execution(desc)
        if ref.execution is None or ref.execution == first:
            running = desc.status == WorkflowExecutionStatus.RUNNING
            return Located(ref, context, first, running, desc.close_time)
        # an earlier run of the thread: it has ended
        handle = self.client.client.get_workflow_handle(ref.workflow_id, run_id=ref.execution)
        try:
            earlier = await handle.describe()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise TaskNotFoundError(f"no task {task_id!r}") from None
            raise
        if tenant_of(await earlier.memo()) != self.principal.tenant:
            raise TaskNotFoundError(f"no task {task_id!r}")
        return Located(ref, context, ref.execution, running=False)

    async def snapshot(self, located: Located, ignore: frozenset[str] = frozenset()) -> Task:
        """The task as it is now (`ignore`: requests just decided, which the run may still
        list)."""
        return await self._task(located, ignore, ended=not located.running)

    async def _task(self, located: Located, ignore: frozenset[str], *, ended: bool) -> Task:
        if ended:
            return ended_task(located.ref, located.context, await self._ending(located))
        pending = await self.client.pending(located.ref.workflow_id)
        return running_task(located.ref, located.context, pending, _now(), ignore)

    async def _ending(self, located: Located) -> Ending:
        """How the run ended, from its result (the end of its continue-as-new chain)."""
        handle = self.client.client.get_workflow_handle(
            located.ref.workflow_id, run_id=located.chain, result_type=RunResult
        )
        closed = located.closed if not located.running else _now()  # seen closing just now
        try:
            result = await asyncio.wait_for(handle.result(follow_runs=True), _RESULT_WAIT)
        except WorkflowFailureError as exc:
            cancelled = isinstance(exc.cause, CancelledError)
            return Ending(None, closed, error=str(exc.cause or exc), cancelled=cancelled)
        output = await asyncio.to_thread(self.client.output_data, result)
        return Ending(
            result.terminal_reason,
            closed,
            error=result.error,
            output=output,
            output_format=result.output_format,
        )

    async def follow(
        self, located: Located, ignore: frozenset[str] = frozenset(), *, fresh: bool = False
    ) -> AsyncGenerator[Event, None]:
        """The task, then what happens to it until it ends or waits for input. A `fresh` task
        (its run started by this call) is sent as submitted, then every step of its run;
        another is sent as it is now, then what happens from now on.

        What the run waits on is asked (`pending`) when its history announces a request, and
        when a long poll finds it quiet (a delegated child's requests are announced in the
        child's history). The query may be ahead of the history read so far: the task goes
        `input-required` once the history has announced the run's own open requests too, so
        the steps that led there are sent first."""
        if not located.running:
            yield await self.snapshot(located, ignore)
            return
        ref, context = located.ref, located.context
        follower = HistoryFollower(self.client.client, ref.workflow_id, located.chain)
        chain = ChainEvents(follower)
        grew = await follower.poll(self.wait)  # what the run holds already
        announced: set[str] = set()
        next_seq = 0
        if fresh:
            yield submitted_task(ref, context, _now())
        else:
            task = await self._task(located, ignore, ended=follower.closed)
            yield task
            if task.status.state in TERMINAL | INTERRUPTED:
                return
            past = chain.new_events(0)  # in the task already
            announced |= {str(e.data.get("request_id")) for e in past if e.kind in ANNOUNCING}
            next_seq, grew = len(past), False
        while True:
            heard = False  # a request announced: does the run wait on it?
            for event in chain.new_events(next_seq) if grew else []:
                next_seq = event.seq + 1
                if event.kind in ANNOUNCING:
                    announced.add(str(event.data.get("request_id")))
                    heard = True
                update = progress_update(ref, context, event)
                if update is not None:
                    yield update
            if follower.closed:
                for last in await self._ended_events(located, ignore):
                    yield last
                return
            if heard or not grew:  # or the run is quiet: it may wait on a child's request
                asking = await self._asking(located, ignore, announced)
                if asking is not None:
                    yield asking
                    return
            grew = await follower.poll(self.wait)

    async def _ended_events(self, located: Located, ignore: frozenset[str]) -> list[Event]:
        """The end of a followed task: its artifacts, then its final status."""
        ended = await self._task(located, ignore, ended=True)
        return [*artifact_update(ended), status_update(ended)]

    async def _asking(
        self, located: Located, ignore: frozenset[str], announced: set[str]
    ) -> Event | None:
        """The `input-required` status of a followed task, when its run waits on a request."""
        pending = await self.client.pending(located.ref.workflow_id)
        if not asks(located.ref.workflow_id, pending, ignore, announced):
            return None
        return status_update(running_task(located.ref, located.context, pending, _now(), ignore))

    async def settle(self, located: Located, ignore: frozenset[str], within: float) -> Task:
        """The task once it has ended or waits for input, or as it is after `within`
        seconds."""
        if located.running:
            stream = self.follow(located, ignore, fresh=True)  # no snapshot: it is read last
            try:
                async with asyncio.timeout(within):
                    async for _ in stream:
                        pass
            except TimeoutError:
                pass
            finally:
                await stream.aclose()
            located = await self.locate(located.ref.task_id)
        return await self.snapshot(located, ignore)

    async def start(
        self, agent: str, said: Said, context: str | None, message_id: str
    ) -> tuple[Located, bool]:
        """A new run of agent `agent` in `context` (a new context when None): the context's
        thread goes on from its previous run, or, while a run of it is going, the message
        goes to that run. The task, and whether the message started its run."""
        text = said.as_text()
        if not text.strip():
            raise InvalidParamsError("a message that starts a task needs text: the task")
        self._require(Scope.STEER, "start a task or send it a message")
        thread = context or f"a2a-{uuid.uuid4().hex[:16]}"
        thread_workflow_id(thread, self.principal.tenant)  # ThreadError: a bad context id
        definition = from_agent(RunSpec(task=text, agent=agent), self.client.settings.agents_file)
        spec = admitted(definition, self.principal)
        sent = await Threads(self.client).send(
            thread,
            text,
            spec,
            message_id or None,
            tenant=self.principal.tenant,
            scopes=self.principal.scopes,
            identity=self.principal.identity,
            **await self.runs.ownership(self.principal),
        )
        chain = sent.execution if sent.started and sent.execution else None
        if chain is None:
            chain = _first_execution(await self.client.describe(sent.run_id))
        return Located(TaskRef(sent.run_id, chain), thread, chain, running=True), sent.started

    async def send(self, located: Located, said: Said, message_id: str) -> frozenset[str]:
        """Deliver a message to the task's run: the decision or answer of the request it
        waits on, else a live message for its model. The requests it decided."""
        if not located.running:
            raise UnsupportedOperationError(
                f"task {located.ref.task_id!r} has ended: send to its context "
                f"{located.context!r} without a taskId to go on"
            )
        run_id = located.ref.workflow_id
        pending = await self.client.pending(run_id)
        if pending.approvals or pending.questions:
            self._require(Scope.APPROVE, "decide the request the task waits on")
            decided = verdict(said, pending)
            request_id = await self._decide(run_id, decided, message_id)
            return frozenset({request_id})
        if said.decisions:
            raise InvalidParamsError(f"task {located.ref.task_id!r} waits on no request")
        text = said.as_text()
        if not text.strip():
            raise InvalidParamsError("the message has no text")
        self._require(Scope.STEER, "send the task a message")
        await self.client.steer(run_id, self._as_sender(LiveMessage(text=text), message_id))
        return frozenset()

    async def _decide(self, run_id: str, decided: Decide | Reply, message_id: str) -> str:
        item: SteeringBase
        if isinstance(decided, Decide):
            request = decided.request
            if decided.arguments is not None:
                problem = await edit_problem(self.client, run_id, request.tool, decided.arguments)
                if problem is not None:
                    raise InvalidParamsError(f"arguments: {problem}")
            item = Decision(
                request_id=request.request_id,
                args_hash=decided.args_hash or request.args_hash,
                action=decided.action,
                reason=decided.reason,
                arguments=decided.arguments,
            )
            request_id = request.request_id
        else:
            item = Answer(request_id=decided.question.request_id, text=decided.text)
            request_id = decided.question.request_id
        target = await self.client.owner(run_id, request_id)  # a delegated child's request
        checked = await self.client.workers_polling()
        item = self._as_sender(item, message_id)
        await self.client.steer(target, item, checked, update_timeout=UPDATE_TIMEOUT)
        return request_id

    async def cancel(self, located: Located) -> frozenset[str]:
        """Ask the task's run to end (`cancelled`); the requests it was waiting on."""
        if not located.running:
            raise TaskNotCancelableError(f"task {located.ref.task_id!r} has ended")
        run_id = located.ref.workflow_id
        waiting = await self.client.pending(run_id)
        item = self._as_sender(CancelRequest(reason="cancelled through A2A"), "")
        await self.client.steer(run_id, item)
        ids = [a.request_id for a in waiting.approvals] + [q.request_id for q in waiting.questions]
        return frozenset(ids)

    def _require(self, scope: Scope, what: str) -> None:
        if not self.principal.may(scope):
            raise InvalidRequestError(f"this token lacks the {scope.value!r} scope to {what}")

    def _as_sender(self, item: SteeringBase, message_id: str) -> SteeringBase:
        """`item` in the principal's name, with the message's id (the same message twice is
        applied once)."""
        return item.model_copy(
            update={"identity": self.principal.identity, "id": message_id or uuid.uuid4().hex}
        )

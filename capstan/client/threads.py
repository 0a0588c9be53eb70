"""Threads: one conversation that goes on across runs.

A thread's runs share one workflow id: `thread-<id>` for the `default` tenant (the CLI's and
Python's), `thread-<tenant>:<id>` for an API tenant (`capstan.core.tenants.thread_workflow_id`;
no name holds `:`, so no tenant can name another's thread). Before a message is delivered, or
a run continued, the thread's latest run must be the sender's tenant's (its tenant memo):
another tenant's workflow at that id (one squatted before run ids starting with `thread-` were
reserved) is refused, never signalled. Temporal allows one running execution per
id, so a thread has at most one active run, and the server, not this client, decides races:
every message travels by signal-with-start, which delivers it to the running run or starts the
next one (of two concurrent starts exactly one wins; the other's message goes to the winner).
A thread's runs work in its own workspace (`RunSpec.workspace`: `<tenant>/threads/<id>`), the
`default` tenant's in the worker's workspace root as before.

A new run goes on from where the previous one stopped: its spec points at that run's
conversation head (the hash chain makes this a pointer, not a copy) plus the few messages its
chain did not hold yet, read from the previous run's result. A call that run left without an
observation (the `finish` that ended it, a call cancelled while it waited for approval) gets one
here, so the continued conversation is one every provider accepts. What the previous run's
context weighed comes along, so the first model call compacts if it must.

Example::

    threads = Threads(await CapstanClient.connect())
    await threads.send("support-42", "Remember: the customer's plan is Pro.")
    sent = await threads.send("support-42", "Which plan is the customer on?")
    print((await threads.capstan.result(sent.run_id)).output)

Never holds run state; everything it shows is read from Temporal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from capstan.client.priority import priority_of
from capstan.client.runs import CapstanClient, CapstanError
from capstan.core import privilege
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.core.spec import RunResult, RunSpec
from capstan.core.steering import STEER, LiveMessage, SteeringBase
from capstan.core.tenants import (
    DEFAULT_TENANT,
    THREAD_PREFIX,
    TenantError,
    tenant_of_memo,
    workspace_key,
)
from capstan.core.tenants import thread_workflow_id as _workflow_id
from capstan.core.workflow_io import WORKFLOW_NAME, StartInput
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import Segment, load_conversation

__all__ = [
    "THREAD_PREFIX",
    "Sent",
    "ThreadError",
    "ThreadRun",
    "ThreadSummary",
    "Threads",
    "closing_messages",
    "thread_workflow_id",
]


class ThreadError(CapstanError):
    """A thread call that could not be made (a bad thread id, no such thread, another
    tenant's thread)."""


def thread_workflow_id(thread: str, tenant: str = DEFAULT_TENANT) -> str:
    """The workflow id every run of the tenant's `thread` has; ThreadError names a bad id."""
    try:
        return _workflow_id(thread, tenant)
    except TenantError as exc:
        raise ThreadError(str(exc)) from None


async def _check_owner(
    desc: WorkflowExecutionDescription | WorkflowExecution | None, thread: str, tenant: str
) -> None:
    """ThreadError unless the thread's execution (if any) is the tenant's."""
    if desc is not None and tenant_of_memo(await desc.memo()) != tenant:
        raise ThreadError(
            f"thread {thread!r} belongs to another tenant: its workflow "
            f"{desc.id} was not started for this one; use another thread id"
        )


class Sent(BaseModel):
    """Where a thread message went: `run_id` (the thread's workflow id), the Temporal
    execution, and whether the message started it (or was delivered to a running run)."""

    thread: str
    run_id: str
    execution: str | None
    started: bool
    message_id: str


class ThreadRun(BaseModel):
    """One run of a thread (its last execution when it continued as new)."""

    execution: str
    status: str
    started: str
    closed: str | None = None
    terminal_reason: str | None = None


class ThreadSummary(BaseModel):
    """One line of `capstan thread ls`: the thread and its latest run."""

    thread: str
    run_id: str
    status: str
    started: str
    terminal_reason: str | None = None


def closing_messages(
    last: Message | None, tail: Sequence[Message], ended: str
) -> tuple[Message, ...]:
    """The messages a continued conversation needs after the previous run's chain: an
    observation for each call of its last assistant message that none in `tail` answers (first,
    as providers require), then `tail`."""
    answered = {m.tool_call_id for m in tail if m.role == "tool"}
    calls = last.tool_calls if last is not None and last.role == "assistant" else ()
    closing = tuple(
        Message(
            role="tool",
            tool_call_id=c.id,
            name=c.name,
            origin="tool",
            step=last.step if last is not None else 0,
            content=f"The run ended ({ended}) with this call."
            if c.name == "finish"
            else f"Not run: the run ended ({ended}) before this call ran.",
        )
        for c in calls
        if c.id not in answered
    )
    return (*closing, *tail)


def _last_message(store: ContentStore, head: BlobRef | None) -> Message | None:
    """The newest message of a chain: its head segment holds it (blocking IO)."""
    if head is None:
        return None
    segment = Segment.model_validate_json(store.read_bytes(head.sha256))
    if segment.messages:
        return segment.messages[-1]
    messages = load_conversation(store, head)
    return messages[-1] if messages else None


def _name(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


class Threads:
    """Send to, continue and list threads through a `CapstanClient`, as one tenant (the
    `default` tenant unless told: the CLI's and the Python client's)."""

    def __init__(self, capstan: CapstanClient) -> None:
        self.capstan = capstan

    async def send(
        self,
        thread: str,
        text: str,
        spec: RunSpec | None = None,
        message_id: str | None = None,
        *,
        tenant: str = DEFAULT_TENANT,
        scopes: Iterable[str] = privilege.OPERATOR,
        identity: str | None = None,
        **start: Any,
    ) -> Sent:
        """Deliver `text` to the thread's running run, or start its next run with `text` as
        the task, continuing the previous run's conversation (see `next_spec`). Same
        `message_id` twice: delivered once to a run. `tenant`: whose thread (another tenant's
        workflow at its id is ThreadError, never signalled). `scopes`: the sender's (the next
        run takes its privileges from them, `capstan.core.privilege.admit`). `start`: more
        options of the start (`memo`, `search_attributes`: the API's tenant). `identity`: the
        sender recorded with the message (default: this client's; the API passes the token's)."""
        run_id = thread_workflow_id(thread, tenant)
        latest = await self._latest(run_id)
        await _check_owner(latest, thread, tenant)
        message = LiveMessage(text=text, id=message_id or "", identity=identity or "")
        item = await self.capstan.prepared(message)
        delivered = await self._deliver(thread, latest, item)
        if delivered is not None:
            return delivered
        following = await self.next_spec(thread, text, spec, scopes, tenant=tenant)
        handle = await self.capstan.client.start_workflow(
            WORKFLOW_NAME,
            StartInput(spec=following),
            id=run_id,
            task_queue=self.capstan.settings.task_queue,
            priority=priority_of(following),
            start_signal=STEER,
            start_signal_args=[item],
            **start,
        )
        # the server says whether this call started the run or signalled one started meanwhile
        response = getattr(handle, "_start_workflow_response", None)
        started = bool(getattr(response, "started", True))
        return Sent(
            thread=thread,
            run_id=run_id,
            execution=handle.result_run_id,
            started=started,
            message_id=item.id,
        )

    async def next_spec(
        self,
        thread: str,
        text: str,
        spec: RunSpec | None = None,
        scopes: Iterable[str] = privilege.OPERATOR,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> RunSpec:
        """The spec the thread's next run starts with: `spec`, else the previous run's (its
        agent, model, tools and policy) narrowed to what the sender's `scopes` allow, else the
        defaults; `text` is its task, it goes on from the previous run's conversation, and it
        works in the thread's workspace."""
        run_id = thread_workflow_id(thread, tenant)
        execution = await self._last_returned(run_id, tenant)
        previous = await self._result(run_id, execution) if execution else None
        if spec is not None:
            spec = privilege.admit(spec, scopes)
        elif execution is not None:
            spec = await self.capstan.started_spec(run_id, execution)
            spec = privilege.admit(spec, scopes, inherited=True) if spec else None
        base = (spec or RunSpec(task=text)).model_copy(
            update={
                "task": text,
                "thread": thread,
                "run_id": run_id,
                "continues": None,
                "continues_tail": (),
                "continues_tokens": 0,
                "continues_unread": None,
                "workspace": workspace_key(tenant, thread),
            }
        )
        return await self.continued(privilege.fair_share(base, tenant, scopes), previous)

    async def previous(self, thread: str, tenant: str = DEFAULT_TENANT) -> RunResult | None:
        """The result of the thread's last run that returned one (None: no such run, or the
        last run is still going)."""
        run_id = thread_workflow_id(thread, tenant)
        execution = await self._last_returned(run_id, tenant)
        return await self._result(run_id, execution) if execution else None

    async def continued(self, spec: RunSpec, previous: RunResult | None) -> RunSpec:
        """`spec` pointing at where `previous` left the conversation (unchanged without one)."""
        if previous is None or (
            previous.conversation is None and not previous.tail and previous.unread is None
        ):
            return spec
        store = self.capstan.content()
        last = await asyncio.to_thread(_last_message, store, previous.conversation)
        tail = closing_messages(last, previous.tail, previous.terminal_reason.value)
        return spec.model_copy(
            update={
                "continues": previous.conversation,
                "continues_tail": tail,
                "continues_tokens": previous.context_tokens,
                "continues_unread": previous.unread,
            }
        )

    async def runs(self, thread: str, tenant: str = DEFAULT_TENANT) -> list[ThreadRun]:
        """The tenant's runs of the thread, oldest first; ThreadError when it has none."""
        run_id = thread_workflow_id(thread, tenant)
        found: list[tuple[datetime, ThreadRun]] = []
        async for wf in self.capstan.client.list_workflows(f"WorkflowId = '{run_id}'"):
            if wf.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                continue  # one run's earlier execution
            if tenant_of_memo(await wf.memo()) != tenant:
                continue  # not this tenant's (a workflow squatted at the id)
            found.append((wf.start_time, await self._run(wf)))
        if not found:
            raise ThreadError(f"no thread {thread!r}")
        # by the full start time: two runs often start within the second the listing shows
        return [run for _, run in sorted(found, key=lambda pair: pair[0])]

    async def list_threads(
        self, limit: int = 50, tenant: str = DEFAULT_TENANT
    ) -> list[ThreadSummary]:
        """The tenant's threads with their latest run, newest first."""
        query = f"WorkflowType = '{WORKFLOW_NAME}'"
        prefix = THREAD_PREFIX if tenant == DEFAULT_TENANT else f"{THREAD_PREFIX}{tenant}:"
        seen: dict[str, ThreadSummary] = {}
        async for wf in self.capstan.client.list_workflows(query):
            name = wf.id.removeprefix(prefix)
            if name == wf.id or ":" in name or wf.id in seen:
                continue
            if tenant_of_memo(await wf.memo()) != tenant:
                continue
            seen[wf.id] = ThreadSummary(
                thread=name,
                run_id=wf.id,
                status=_name(wf.status),
                started=wf.start_time.isoformat(timespec="seconds"),
                terminal_reason=await self.capstan.terminal_reason(wf),
            )
            if len(seen) >= limit:
                break
        return list(seen.values())

    async def _run(self, wf: WorkflowExecution) -> ThreadRun:
        return ThreadRun(
            execution=wf.run_id,
            status=_name(wf.status),
            started=wf.start_time.isoformat(timespec="seconds"),
            closed=wf.close_time.isoformat(timespec="seconds") if wf.close_time else None,
            terminal_reason=await self.capstan.terminal_reason(wf),
        )

    async def _deliver(
        self, thread: str, latest: WorkflowExecutionDescription | None, item: SteeringBase
    ) -> Sent | None:
        """Signal the running run `latest` (the sender's tenant's), if it runs (None: there
        is none, or it just ended)."""
        if latest is None or latest.status != WorkflowExecutionStatus.RUNNING:
            return None
        try:
            # that very execution: a run started meanwhile at the id is never signalled blind
            await self.capstan.client.get_workflow_handle(latest.id, run_id=latest.run_id).signal(
                STEER, item
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None  # it ended meanwhile: the caller starts the next run
            raise
        return Sent(
            thread=thread,
            run_id=latest.id,
            execution=latest.run_id,
            started=False,
            message_id=item.id,
        )

    async def _last_returned(self, run_id: str, tenant: str) -> str | None:
        """The execution of the tenant's last run of the thread that returned a result (None
        while the latest runs); a run ended outside Capstan (terminated) is passed over."""
        latest = await self._latest(run_id)
        if latest is None or latest.status == WorkflowExecutionStatus.RUNNING:
            return None
        if latest.status == WorkflowExecutionStatus.COMPLETED:
            await _check_owner(latest, run_id, tenant)
            return latest.run_id
        query = f"WorkflowId = '{run_id}' AND ExecutionStatus = 'Completed'"
        async for wf in self.capstan.client.list_workflows(query):
            if tenant_of_memo(await wf.memo()) == tenant:
                return wf.run_id
        return None

    async def _result(self, run_id: str, execution: str) -> RunResult:
        handle = self.capstan.client.get_workflow_handle(
            run_id, run_id=execution, result_type=RunResult
        )
        result: RunResult = await handle.result(follow_runs=False)
        return result

    async def _latest(self, run_id: str) -> WorkflowExecutionDescription | None:
        try:
            return await self.capstan.handle(run_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

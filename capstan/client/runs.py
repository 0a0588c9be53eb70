"""The Python client: start, steer and inspect runs.

Example::

    from capstan import CapstanClient, RunSpec

    capstan = await CapstanClient.connect()          # TEMPORAL_ADDRESS or the embedded default
    run_id = await capstan.start_run(RunSpec(task="List the workspace and summarise it"))
    result = await capstan.result(run_id)
    print(result.terminal_reason, result.output)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pydantic import BaseModel
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from capstan.client.priority import priority_of
from capstan.client.typed import (
    OutputTypeError,
    RunNotCompletedError,
    RunStatusView,
    typed_output,
    typed_spec,
)
from capstan.core import privilege
from capstan.core.activity_names import ActivityName
from capstan.core.children import ChildRun
from capstan.core.errors import CapstanError, SteeringError, StoreError
from capstan.core.limits import INPUT_TEXT_BYTES
from capstan.core.model_errors import ModelErrorKind
from capstan.core.spec import CAPACITY, RunResult, RunSpec, RunStatus
from capstan.core.steering import (
    STEER,
    Ack,
    Answer,
    BudgetGrant,
    BudgetName,
    CancelRequest,
    Decision,
    LiveMessage,
    PauseRequest,
    PendingView,
    ResumeRequest,
    SteeringBase,
    StepGrant,
    pick_request,
    size_problem,
    text_fields,
)
from capstan.core.workflow_io import (
    CHILDREN_MEMO,
    REQUESTS_MEMO,
    TERMINAL_MEMO,
    WORKFLOW_NAME,
    OpenRequests,
    Query,
    StartInput,
    TranscriptView,
)
from capstan.runtime.blobs import content_store_for
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.codec import CodecError
from capstan.runtime.config import Settings
from capstan.runtime.connect import connect_temporal

log = logging.getLogger("capstan.client")
T = TypeVar("T")

if TYPE_CHECKING:
    from capstan.audit.snapshot import Snapshot

__all__ = [
    "CapstanClient",
    "CapstanError",
    "OutputTypeError",
    "RejectedError",
    "RunNotCompletedError",
    "RunNotFoundError",
    "RunSummary",
    "SteeringError",
    "UpdateTimeoutError",
    "connect_temporal",
    "tree_roots",
]


class RunNotFoundError(CapstanError):
    """No run has this id."""


class RejectedError(SteeringError):
    """The run rejected a validated input (an update); nothing was written to its history."""


class UpdateTimeoutError(SteeringError):
    """Temporal gave up waiting for the worker to answer a validated input (its RPC deadline
    passed): the input may or may not be applied. Sending it again with the same id is safe."""


class RunSummary(BaseModel):
    """One line of `capstan ls`: Temporal's status and, once it ended, the run's own reason."""

    run_id: str
    status: str
    started: str
    terminal_reason: str | None = None
    #: why a field shows `?` (the run's memo or result could not be decoded with these keys)
    note: str | None = None


async def _snapshot(client: Client, run_id: str) -> Snapshot:
    """The run as its history tells it (every execution of its chain), for answers that need
    no worker. History reading loads where it is used: every command pays the client's import."""
    from capstan.audit.history import load_histories
    from capstan.audit.snapshot import Snapshot

    return Snapshot(run_id, await load_histories(client, run_id))


def _pushed_back(desc: WorkflowExecutionDescription) -> bool:
    """A model call of the run is being retried because its provider answered 429 (it waits
    for provider capacity: `capstan limits`)."""
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name != ActivityName.CALL_MODEL:
            continue
        failure = pending.last_failure
        if failure.application_failure_info.type == ModelErrorKind.RATE_LIMITED:
            return True
    return False


class CapstanClient:
    """Start and steer agent runs. Every call works while no worker is running."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> CapstanClient:
        settings = settings or Settings.from_env()
        return cls(await connect_temporal(settings), settings)

    def content(self) -> ContentStore:
        """The blob store the workers write to (`capstan.runtime.blobs`), for resolving refs
        in transcripts and outputs."""
        return content_store_for(self.settings)

    def handle(self, run_id: str) -> WorkflowHandle[object, RunResult]:
        return self.client.get_workflow_handle(run_id, result_type=RunResult)

    async def start_run(self, spec: RunSpec, *, output_type: Any = None) -> str:
        """Start a run and return its id (the workflow id). With `output_type` (a pydantic
        model, or any type pydantic validates) the run answers with data of that type: its
        JSON Schema becomes `spec.output_schema` (`capstan.client.typed`)."""
        if output_type is not None:
            spec = typed_spec(spec, output_type)
        if spec.thread is not None:  # its task travels as the start signal
            raise CapstanError("a thread run starts with `Threads.send` (capstan.client.threads)")
        run_id = spec.run_id or f"run-{uuid.uuid4().hex[:12]}"
        # the caller reaches Temporal itself: the operator (capstan.core.privilege)
        spec = privilege.admit(spec.model_copy(update={"run_id": run_id}), privilege.OPERATOR)
        await self.client.start_workflow(
            WORKFLOW_NAME,
            StartInput(spec=spec),
            id=run_id,
            task_queue=self.settings.task_queue,
            priority=priority_of(spec),
        )
        if (warning := await self.no_worker_warning(run_id)) is not None:
            log.warning("%s", warning)
        return run_id

    async def no_worker_warning(self, run_id: str) -> str | None:
        """What to tell the starter of `run_id` when no worker polls its queue (the run is
        stored and waits; nothing else would say so), or None."""
        with contextlib.suppress(RPCError):
            if await self.workers_polling():
                return None
        return (
            f"run {run_id} is stored, but no worker is polling task queue "
            f"{self.settings.task_queue!r}: it starts when one does (`capstan worker`)"
        )

    @overload
    async def result(self, run_id: str) -> RunResult: ...

    @overload
    async def result(self, run_id: str, output_type: type[T]) -> T: ...

    async def result(self, run_id: str, output_type: type[T] | None = None) -> RunResult | T:
        """Wait for the run's result, following continue-as-new. With `output_type`, its
        answer validated as that type (`RunNotCompletedError` if it did not complete)."""
        result = await self.handle(run_id).result(follow_runs=True)
        if output_type is None:
            return result
        return self.typed_output(result, output_type)

    def typed_output(self, result: RunResult, output_type: type[T]) -> T:
        """A completed run's answer as a validated `output_type` (its output resolved)."""
        text = self.content().resolve(result.output) if result.output is not None else ""
        return typed_output(result, text, output_type)

    def status_view(self, status: RunStatus) -> RunStatusView:
        """`status` with its output as data (`RunStatusView`); an output this client cannot
        read (its blob missing, its key not here) stays the ref it is."""
        shown = status.model_dump(exclude={"output"})
        try:
            output = self.output_data(status)
        except (StoreError, ValueError):
            output = status.model_dump(mode="json")["output"]
        return RunStatusView(**shown, output=output)

    def output_data(self, result: RunResult | RunStatus) -> Any:
        """The output as data: a typed result's JSON parsed, else its text (None: no output)."""
        if result.output is None:
            return None
        text = self.content().resolve(result.output)
        return json.loads(text) if result.output_format == "json" else text

    async def started_spec(self, run_id: str, execution: str | None = None) -> RunSpec | None:
        """The spec a run started with, from the first event of its history (of `execution`,
        default the latest: a continue-as-new carries the same spec); None for another
        workflow type."""
        handle = self.client.get_workflow_handle(run_id, run_id=execution)
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            (start,) = await self.client.data_converter.decode(list(payloads)[:1], [StartInput])
            return start.spec if isinstance(start, StartInput) else None
        return None

    async def describe(self, run_id: str) -> WorkflowExecutionDescription:
        """The run's latest execution; `RunNotFoundError` names an unknown id."""
        try:
            return await self.handle(run_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(f"no run {run_id!r}") from None
            raise

    async def workers_polling(self) -> bool:
        """Whether any worker polls this client's task queue (recently: Temporal keeps a
        poller listed for a while after its worker died)."""
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(name=self.settings.task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        response = await self.client.workflow_service.describe_task_queue(request)
        return bool(response.pollers)

    async def status(self, run_id: str, query_timeout: float = 5.0) -> RunStatus:
        """Phase, step, terminal reason, output and usage. Never needs a worker: a closed run
        answers from its result, a running one from its worker or, with none answering, from
        its history (`source` says which)."""
        desc = await self.describe(run_id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            # its result says all (diagnostics included): no worker is asked, so a worker
            # that died but is still listed as polling never holds the answer up
            return await self._closed_status(run_id, desc)
        status: RunStatus | None = None
        if await self.workers_polling():
            # no answer, a worker that cannot replay the run (WorkflowQueryFailedError): the
            # run is read from its history instead
            with contextlib.suppress(RPCError, TimeoutError, WorkflowQueryFailedError):
                status = await asyncio.wait_for(
                    self.handle(run_id).query(Query.STATUS.value, result_type=RunStatus),
                    query_timeout,
                )
        if status is None:
            status = (await _snapshot(self.client, run_id)).status(None)
        if _pushed_back(desc) and CAPACITY not in status.waiting_for:
            return status.model_copy(update={"waiting_for": [*status.waiting_for, CAPACITY]})
        return status

    async def _closed_status(self, run_id: str, desc: WorkflowExecutionDescription) -> RunStatus:
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            result = await self.result(run_id)
            if result.continued is not None:  # the result says all: no history is read
                return result.status(result.continued)
            return (await _snapshot(self.client, run_id)).status(result)
        snap = await _snapshot(self.client, run_id)
        ended = desc.status.name.lower() if desc.status else "closed"
        return snap.status(None).model_copy(
            update={"phase": "finished", "error": f"the workflow ended {ended} outside Capstan"}
        )

    async def transcript_view(self, run_id: str, query_timeout: float = 5.0) -> TranscriptView:
        """Every step so far. Asks the run's worker; with none answering, rebuilds the view
        from history (the conversation up to the last model reply plus tool results since)."""
        await self.describe(run_id)
        if await self.workers_polling():
            # no answer, a worker that cannot replay the run (WorkflowQueryFailedError): the
            # run is read from its history instead
            with contextlib.suppress(RPCError, TimeoutError, WorkflowQueryFailedError):
                view: TranscriptView = await asyncio.wait_for(
                    self.handle(run_id).query(Query.TRANSCRIPT.value, result_type=TranscriptView),
                    query_timeout,
                )
                return view
        return (await _snapshot(self.client, run_id)).transcript()

    # Steering ----------------------------------------------------------------------------------
    #
    # Every call sends a signal by default: durable as soon as the server has it, even with no
    # worker running. `checked=True` sends the validated update twin instead, which needs a
    # worker and raises RejectedError with the run's reason when the input is refused.

    async def steer(
        self, run_id: str, item: SteeringBase, checked: bool = False, update_timeout: float = 15.0
    ) -> Ack | None:
        """Send one steering input, filling in a fresh id and this client's identity. Large
        text goes to the blob store first and travels as a ref; an input still over the bounds
        of `capstan.core.limits` (an id of 1,000 characters) raises SteeringError unsent.

        `checked` sends the validated update; if no worker takes it within `update_timeout`
        seconds the same input goes as a signal instead (and None is returned). When Temporal
        itself gives up on the update first, `UpdateTimeoutError` says so."""
        item = await self.prepared(item)
        handle = self.handle(run_id)
        try:
            if not checked:
                await handle.signal(STEER, item)
                return None
            window = asyncio.timeout(update_timeout)
            try:
                async with window:
                    ack: Ack = await handle.execute_update(STEER, item, result_type=Ack)
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                # the SDK turns our own timeout's cancellation into its RPC error
                if not window.expired():
                    raise _update_timed_out(run_id, item) from None
                # no worker took the update in time: the signal (same id, applied once) is
                # durable and waits for one
                await handle.signal(STEER, item)
                return None
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            raise RejectedError(getattr(cause, "message", None) or str(cause or exc)) from None
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            desc = await self.describe(run_id)  # raises RunNotFoundError for an unknown id
            ended = desc.status.name.lower() if desc.status else "closed"
            raise SteeringError(f"run {run_id!r} has already ended ({ended})") from None
        return ack

    async def _stored(self, item: SteeringBase) -> SteeringBase:
        """`item` with its large text (over `INPUT_TEXT_BYTES`) written to the blob store and
        sent as refs: a run holds no large text, and the model pages through it."""
        large = {
            name: value
            for name in text_fields(type(item))
            if isinstance(value := getattr(item, name), str)
            and len(value.encode("utf-8")) > INPUT_TEXT_BYTES
        }
        if not large:
            return item
        store = self.content()
        refs = {
            name: await asyncio.to_thread(store.store_bytes, value.encode("utf-8"), value)
            for name, value in large.items()
        }
        return item.model_copy(update=refs)

    async def _own_pending(self, run_id: str, query_timeout: float = 5.0) -> PendingView:
        """Open approval requests and questions of this run alone.

        Asks the run (a query, which needs a worker); with no worker answering, reads the
        requests the run announced in its memo, so a reviewer can still see and decide them.
        A closed run waits for nothing.
        """
        desc = await self.describe(run_id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return PendingView(run_id=run_id)
        if await self.workers_polling():
            # no answer, a worker that cannot replay the run (WorkflowQueryFailedError): the
            # run is read from its history instead
            with contextlib.suppress(RPCError, TimeoutError, WorkflowQueryFailedError):
                view: PendingView = await asyncio.wait_for(
                    self.handle(run_id).query(Query.PENDING.value, result_type=PendingView),
                    query_timeout,
                )
                return view
        memo = await desc.memo()
        raw = memo.get(REQUESTS_MEMO)
        opened = OpenRequests.model_validate(raw) if raw else OpenRequests()
        return PendingView(run_id=run_id, approvals=opened.approvals, questions=opened.questions)

    async def decide(
        self,
        run_id: str,
        action: Literal["approve", "deny", "edit", "always"],
        request_id: str | None = None,
        *,
        args_hash: str | None = None,
        reason: str = "",
        arguments: str | None = None,
        checked: bool = False,
    ) -> Ack | None:
        """Decide an approval request. Without `request_id` exactly one must be open; without
        `args_hash` the hash is read from the `pending` query (what the reviewer is shown). A
        given `args_hash` is always sent as given: the run refuses a decision for other
        arguments than the ones waiting, whether or not the request was named."""
        if request_id is None or args_hash is None:
            open_requests = (await self.pending(run_id)).approvals
            match = pick_request(open_requests, request_id, run_id, "decide")
            request_id = match.request_id
            if args_hash is None:
                args_hash = match.args_hash
        decision = Decision(
            request_id=request_id,
            args_hash=args_hash,
            action=action,
            reason=reason,
            arguments=arguments,
        )
        return await self.steer(await self.owner(run_id, request_id), decision, checked)

    async def cancel(self, run_id: str, reason: str = "", checked: bool = False) -> Ack | None:
        """Ask the run to end at its next step boundary (terminal reason `cancelled`)."""
        return await self.steer(run_id, CancelRequest(reason=reason), checked)

    async def pause(self, run_id: str, reason: str = "", checked: bool = False) -> Ack | None:
        """Stop scheduling activities at the next step boundary until `resume`."""
        return await self.steer(run_id, PauseRequest(reason=reason), checked)

    async def resume(self, run_id: str, checked: bool = False) -> Ack | None:
        return await self.steer(run_id, ResumeRequest(), checked)

    async def send_message(
        self, run_id: str, text: str, message_id: str | None = None, checked: bool = False
    ) -> Ack | None:
        """Deliver `text` to the model at its next step (same id twice: delivered once)."""
        return await self.steer(run_id, LiveMessage(text=text, id=message_id or ""), checked)

    async def answer(
        self, run_id: str, request_id: str, text: str, checked: bool = False
    ) -> Ack | None:
        """Answer an `ask_user` question; the answer becomes the tool's observation."""
        owner = await self.owner(run_id, request_id)
        return await self.steer(owner, Answer(request_id=request_id, text=text), checked)

    async def grant_steps(self, run_id: str, steps: int, checked: bool = False) -> Ack | None:
        """Let a run waiting at its step limit take `steps` more (0 ends it `max_steps`)."""
        return await self.steer(run_id, StepGrant(steps=steps), checked)

    async def live_text(self, run_id: str) -> dict[str, object] | None:
        """The reply streaming in right now, if any: `{"step", "attempt", "chars", "tail"}`.

        Read from the running model activity's heartbeat details: ephemeral, never in history.
        A watcher drops what it saw for an attempt once a higher attempt of the step appears.
        """
        desc = await self.handle(run_id).describe()
        converter = self.client.data_converter
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name != ActivityName.CALL_MODEL:
                continue
            payloads = list(pending.heartbeat_details.payloads)
            if not payloads:
                return None
            (details,) = await converter.decode(payloads, [dict])
            return details if isinstance(details, dict) else None
        return None

    async def grant_budget(
        self, run_id: str, budget: BudgetName, amount: float, checked: bool = False
    ) -> Ack | None:
        """Add `amount` to a budget of a run waiting because that budget ran out."""
        return await self.steer(run_id, BudgetGrant(budget=budget, amount=amount), checked)

    async def running_runs(self, limit: int = 200) -> list[str]:
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"
        return [wf.id async for wf in self.client.list_workflows(query, limit=limit)]

    async def is_running(self, run_id: str) -> bool:
        desc = await self.describe(run_id)
        return desc.status == WorkflowExecutionStatus.RUNNING

    async def list_runs(
        self, limit: int = 50, terminal_reason: str | None = None
    ) -> AsyncIterator[RunSummary]:
        """Runs, newest first; with `terminal_reason`, only the runs that ended so."""
        query = f"WorkflowType = '{WORKFLOW_NAME}'"
        seen: set[str] = set()
        shown = 0
        async for wf in self.client.list_workflows(query):
            if wf.id in seen:
                continue  # an earlier run of a continue-as-new chain
            seen.add(wf.id)
            try:  # one run written under other keys must not hide every other run
                reason, note = await self._terminal_reason(wf), None
            except CodecError as exc:
                reason, note = "?", f"its ending cannot be decoded: {exc}"
            summary = RunSummary(
                run_id=wf.id,
                status=wf.status.name.lower() if wf.status else "unknown",
                started=wf.start_time.isoformat(timespec="seconds"),
                terminal_reason=reason,
                note=note,
            )
            if terminal_reason is not None and summary.terminal_reason != terminal_reason:
                continue
            yield summary
            shown += 1
            if shown >= limit:
                return

    async def _terminal_reason(self, wf: WorkflowExecution) -> str | None:
        """From the memo; runs from before it was written there answer from their result."""
        if wf.status != WorkflowExecutionStatus.COMPLETED:
            return None
        reason = (await wf.memo()).get(TERMINAL_MEMO)
        if isinstance(reason, str):
            return reason
        handle = self.client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=RunResult)
        result: RunResult = await handle.result(follow_runs=False)
        return str(result.terminal_reason.value)

    async def prepared(self, item: SteeringBase) -> SteeringBase:
        """`item` as `steer` sends it (a fresh id, this client's identity, large text as refs),
        for inputs that travel another way: the start signal of a thread run
        (`capstan.client.threads`). SteeringError when it is still over the bounds."""
        update: dict[str, str] = {}
        if not item.id:
            update["id"] = uuid.uuid4().hex
        if not item.identity:
            update["identity"] = self.settings.identity
        item = await self._stored(item.model_copy(update=update))
        problem = size_problem(item)
        if problem is not None:
            raise SteeringError(f"{item.wire.commands[0]}: {problem}")
        return item

    async def terminal_reason(self, wf: WorkflowExecution) -> str | None:
        """How a listed execution ended, by Capstan's reason (None while it runs)."""
        return await self._terminal_reason(wf)

    async def pending(self, run_id: str, query_timeout: float = 5.0) -> PendingView:
        """Open approval requests and questions, the run's children's included.

        Asks the run (a query, which needs a worker); with no worker answering, reads the
        requests the run announced in its memo, so a reviewer can still see and decide them.
        A closed run waits for nothing. A child's requests (its id, and so their ids, is the
        path `parent/agent-STEP.INDEX`) are listed with the parent's, and deciding or
        answering them through the parent reaches the child (`owner`).
        """
        view = await self._own_pending(run_id, query_timeout)
        approvals, questions = list(view.approvals), list(view.questions)
        for child in await self.children(run_id):
            below = await self.pending(child.workflow_id, query_timeout)
            approvals += below.approvals
            questions += below.questions
        return view.model_copy(update={"approvals": approvals, "questions": questions})

    async def children(self, run_id: str) -> list[ChildRun]:
        """The runs `run_id` delegated to, from its memo (no worker needed)."""
        raw = (await (await self.describe(run_id)).memo()).get(CHILDREN_MEMO)
        return [ChildRun.model_validate(c) for c in raw or []]

    async def owner(self, run_id: str, request_id: str) -> str:
        """The run of `run_id`'s tree that opened `request_id`: the deepest child whose id (the
        path) prefixes it, else `run_id` itself."""
        before, _, rest = request_id.partition(f"{run_id}/")
        if not before and rest.partition("/")[0].isdigit():
            # `<run>/<step>/<call>` is the run's own (a child's id is `<run>/<agent>-<step>.<i>`):
            # no describe round trip before the decision goes out
            return run_id
        for child in await self.children(run_id):
            if request_id.startswith(child.workflow_id + "/"):
                return await self.owner(child.workflow_id, request_id)
        return run_id


def _update_timed_out(run_id: str, item: SteeringBase) -> BaseException:
    """The error for an update Temporal stopped waiting for; a cancelled caller stays
    cancelled (the SDK reports its cancellation as the same RPC error)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return asyncio.CancelledError()
    return UpdateTimeoutError(
        f"run {run_id!r}: the worker did not answer in time; the input may not be applied "
        f"(sending it again with id {item.id!r} applies it once)"
    )


def tree_roots(run_ids: list[str]) -> list[str]:
    """The runs that are not delegated children of another listed run: a parent's `pending`
    already lists its children's requests under their paths (`parent/agent-STEP.INDEX`)."""
    listed = set(run_ids)
    return [r for r in run_ids if not any(r.startswith(f"{p}/") for p in listed if p != r)]

"""`AgentWorkflow`: the Temporal interpreter of the pure loop in `capstan.loop`.

It turns effects into activities and signals into outcomes, and nothing else: every decision is
the loop's. Deterministic by law: no clock, random, IO or environment here (ruff bans them).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from capstan import inputs, loop
    from capstan.activity_io import (
        CheckFinishInput,
        CompactResult,
        FinishVerdict,
        ModelReply,
        RunToolInput,
    )
    from capstan.effects import (
        AwaitInput,
        Boundary,
        CallModel,
        CancelRequested,
        CheckFinish,
        CompactContext,
        CompactionFailed,
        ContextCompacted,
        ContinueAsNew,
        DescribeModel,
        Effect,
        Finish,
        FinishChecked,
        LoadTools,
        ModelDescribed,
        ModelFailed,
        ModelReplied,
        Outcome,
        RunTools,
        Steered,
        ToolsFinished,
        ToolsLoaded,
    )
    from capstan.model_errors import NON_RETRYABLE
    from capstan.models import ModelChain
    from capstan.spec import RunResult, RunStatus, TerminalReason
    from capstan.state import RunState
    from capstan.steering import (
        Ack,
        Answer,
        BudgetGrant,
        CancelRequest,
        Decision,
        LiveMessage,
        PauseRequest,
        PendingView,
        ResumeRequest,
        SteeringInput,
        StepGrant,
    )
    from capstan.tooling import ToolCatalog, ToolFailed, ToolOutcome
    from capstan.workflow_io import (
        ANNOUNCE_PATCH,
        CANCEL_IN_FLIGHT_PATCH,
        CONTEXT_PATCH,
        GUARDS_PATCH,
        REQUESTS_MEMO,
        TOOL_POLICY_PATCH,
        WORKFLOW_NAME,
        AgentInput,
        OpenRequests,
        TranscriptView,
    )

__all__ = ["AgentWorkflow"]

# An Annotated union is not a `type` to mypy, but the pydantic converter decodes it.
TOOL_OUTCOME: type = ToolOutcome  # type: ignore[assignment]

MODEL_NON_RETRYABLE = list(NON_RETRYABLE)


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """One agent run.

    Signals (durable even with no worker running; each has a `_update` twin that validates and
    acknowledges): `decide`, `pause`, `resume`, `cancel`, `send_message`, `answer`,
    `grant_steps`, `grant_budget`. Queries: `status`, `transcript`, `pending`.
    """

    @workflow.init
    def __init__(self, start: AgentInput) -> None:
        self.state: RunState = start.carried or loop.initial_state(
            start.spec,
            start.spec.run_id or workflow.info().workflow_id,
            gating=False,
            context_managed=False,
            guarded=False,
        )
        self._inputs = 0  # bumped by every accepted input; wakes AwaitInput
        self._announced: list[str] = []  # the request ids the memo lists now
        self._bug: _LoopBugError | None = None  # a loop error met inside a signal handler

    @workflow.run
    async def run(self, start: AgentInput) -> RunResult:
        if start.carried is None and workflow.patched(TOOL_POLICY_PATCH):
            self.state = self.state.model_copy(update={"gating": True})
        if start.carried is None and workflow.patched(CONTEXT_PATCH):
            self.state = self.state.model_copy(update={"context_managed": True})
        if start.carried is None and workflow.patched(GUARDS_PATCH):
            self.state = self.state.model_copy(update={"guarded": True})
        return await self._main(start)

    async def _main(self, start: AgentInput) -> RunResult:
        try:
            while True:
                if self._bug is not None:
                    raise self._bug
                self._fold(Boundary(now=workflow.now()))
                effect = self._decide()
                if isinstance(effect, Finish):
                    self._count_end(effect.result)
                    return effect.result
                if isinstance(effect, ContinueAsNew):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    carried = loop.carry_over(self.state)
                    workflow.continue_as_new(AgentInput(spec=start.spec, carried=carried))
                self._announce_requests()
                if isinstance(effect, AwaitInput):
                    self._gauge_waiting()
                    await self._await_input(effect)
                    self._gauge_waiting()
                    continue
                outcome = await self._perform_unless_cancelled(effect)
                if outcome is not None:
                    self._fold(outcome)
        except asyncio.CancelledError:
            # A Temporal cancellation request: end with a result, not a failure.
            self._fold(CancelRequested(reason="cancellation requested through Temporal"))
            return self._final()
        except _LoopBugError as bug:
            workflow.logger.exception("loop raised; ending the run as failed")
            return self._failed(bug)

    # Signals and queries -------------------------------------------------------------------

    @workflow.signal(name="decide")
    def decide(self, decision: Decision) -> None:
        self._steer(decision)

    @workflow.signal(name="pause")
    def pause(self, request: PauseRequest) -> None:
        self._steer(request)

    @workflow.signal(name="resume")
    def resume(self, request: ResumeRequest) -> None:
        self._steer(request)

    @workflow.signal(name="cancel")
    def cancel(self, request: CancelRequest) -> None:
        self._steer(request)

    @workflow.signal(name="send_message")
    def send_message(self, message: LiveMessage) -> None:
        self._steer(message)

    @workflow.signal(name="answer")
    def answer(self, answer: Answer) -> None:
        self._steer(answer)

    @workflow.signal(name="grant_steps")
    def grant_steps(self, grant: StepGrant) -> None:
        self._steer(grant)

    @workflow.signal(name="grant_budget")
    def grant_budget(self, grant: BudgetGrant) -> None:
        self._steer(grant)

    # Updates: the same inputs, validated first; a rejection writes nothing to history.

    @workflow.update(name="decide_update")
    def decide_update(self, decision: Decision) -> Ack:
        return self._steer(decision)

    @decide_update.validator
    def _check_decide(self, decision: Decision) -> None:
        self._validate(decision)

    @workflow.update(name="pause_update")
    def pause_update(self, request: PauseRequest) -> Ack:
        return self._steer(request)

    @workflow.update(name="resume_update")
    def resume_update(self, request: ResumeRequest) -> Ack:
        return self._steer(request)

    @workflow.update(name="cancel_update")
    def cancel_update(self, request: CancelRequest) -> Ack:
        return self._steer(request)

    @cancel_update.validator
    def _check_cancel(self, request: CancelRequest) -> None:
        self._validate(request)

    @workflow.update(name="send_message_update")
    def send_message_update(self, message: LiveMessage) -> Ack:
        return self._steer(message)

    @send_message_update.validator
    def _check_message(self, message: LiveMessage) -> None:
        self._validate(message)

    @workflow.update(name="answer_update")
    def answer_update(self, answer: Answer) -> Ack:
        return self._steer(answer)

    @answer_update.validator
    def _check_answer(self, answer: Answer) -> None:
        self._validate(answer)

    @workflow.update(name="grant_steps_update")
    def grant_steps_update(self, grant: StepGrant) -> Ack:
        return self._steer(grant)

    @grant_steps_update.validator
    def _check_grant(self, grant: StepGrant) -> None:
        self._validate(grant)

    @workflow.update(name="grant_budget_update")
    def grant_budget_update(self, grant: BudgetGrant) -> Ack:
        return self._steer(grant)

    @grant_budget_update.validator
    def _check_budget_grant(self, grant: BudgetGrant) -> None:
        self._validate(grant)

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return loop.status(self.state)

    @workflow.query(name="pending")
    def pending(self) -> PendingView:
        return self.state.pending_view()

    @workflow.query(name="transcript")
    def transcript(self) -> TranscriptView:
        return TranscriptView(
            conversation=self.state.conversation,
            pending=list(self.state.pending),
            in_flight=list(self.state.turn_calls),
            step=self.state.step,
            records=list(self.state.records),
            diagnostics=list(self.state.diagnostics),
            inbox=list(self.state.inbox),
        )

    def _validate(self, item: SteeringInput) -> None:
        if inputs.is_duplicate(self.state, item):
            return  # acknowledged as a duplicate, not rejected
        problem = inputs.check(self.state, item)
        if problem is not None:
            raise ValueError(problem)

    def _steer(self, item: SteeringInput) -> Ack:
        if inputs.is_duplicate(self.state, item):
            return Ack(applied=False, detail=f"duplicate id {item.id!r}: already applied")
        try:
            self._fold(Steered(input=item))
        except _LoopBugError as bug:
            # a raising handler would fail its workflow task again and again: the run ends
            # `failed` at its next step instead
            self._bug = bug
        self._inputs += 1
        return Ack(applied=True)

    def _count_end(self, result: RunResult) -> None:
        """Runs by terminal reason (the workflow metric meter is silent during replay)."""
        counter = workflow.metric_meter().create_counter("capstan_runs_ended", "runs")
        counter.add(1, {"terminal_reason": result.terminal_reason.value})

    def _announce_requests(self) -> None:
        """Keep the open approval requests and questions in the memo: that puts them in history
        (for audits and the event stream) and lets clients see them with no worker running."""
        opened = [r.request_id for r in self.state.approvals]
        opened += [q.request_id for q in self.state.questions]
        if opened == self._announced or not workflow.patched(ANNOUNCE_PATCH):
            return
        self._announced = opened
        requests = OpenRequests(
            approvals=list(self.state.approvals), questions=list(self.state.questions)
        )
        workflow.upsert_memo({REQUESTS_MEMO: requests})

    def _gauge_waiting(self) -> None:
        gauge = workflow.metric_meter().create_gauge("capstan_approvals_waiting", "requests")
        gauge.set(len(self.state.approvals), {"run_id": self.state.run_id})

    async def _await_input(self, effect: AwaitInput) -> None:
        """Wait durably until an input arrives or the earliest expiry passes."""
        seen = self._inputs
        timeout = None
        if effect.until is not None:
            timeout = max((effect.until - workflow.now()).total_seconds(), 0.001)
        # on timeout, the next Boundary settles the expiry
        with contextlib.suppress(builtins.TimeoutError):
            await workflow.wait_condition(lambda: self._inputs != seen, timeout=timeout)

    # Interpreter -----------------------------------------------------------------------------

    def _decide(self) -> Effect:
        try:
            return loop.next_effect(
                self.state, continue_suggested=workflow.info().is_continue_as_new_suggested()
            )
        except Exception as exc:
            raise _LoopBugError(exc) from exc

    def _fold(self, outcome: Outcome) -> None:
        try:
            self.state = loop.apply(self.state, outcome)
        except Exception as exc:
            raise _LoopBugError(exc) from exc

    def _final(self) -> RunResult:
        effect = loop.next_effect(self.state)
        assert isinstance(effect, Finish)
        return effect.result

    def _failed(self, bug: _LoopBugError) -> RunResult:
        return RunResult(
            run_id=self.state.run_id,
            terminal_reason=TerminalReason.FAILED,
            output=self.state.output,
            error=f"internal error: {type(bug.cause).__name__}: {bug.cause}",
            steps=self.state.step,
            usage=self.state.usage,
        )

    async def _perform_unless_cancelled(self, effect: Effect) -> Outcome | None:
        """Perform `effect`; a `cancel` signal arriving meanwhile cancels its activities (tools
        learn it through their heartbeats) and the run ends at once with its partial result."""
        work = asyncio.ensure_future(self._perform(effect))
        await workflow.wait_condition(lambda: work.done() or self.state.cancel_reason is not None)
        if work.done() or not workflow.patched(CANCEL_IN_FLIGHT_PATCH):
            return await work
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return None

    async def _perform(self, effect: Effect) -> Outcome:
        match effect:
            case LoadTools(request=request):
                catalog = await workflow.execute_activity(
                    "list_tools",
                    request,
                    result_type=ToolCatalog,
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RetryPolicy(maximum_attempts=5),
                )
                return ToolsLoaded(catalog=catalog)
            case DescribeModel(request=request):
                try:
                    chain = await workflow.execute_activity(
                        "describe_model",
                        request,
                        result_type=ModelChain,
                        start_to_close_timeout=timedelta(seconds=30),
                        retry_policy=RetryPolicy(
                            maximum_attempts=3, non_retryable_error_types=MODEL_NON_RETRYABLE
                        ),
                    )
                except ActivityError as exc:
                    _reraise_cancellation(exc)
                    kind, message = _describe(exc)
                    return ModelFailed(error=message, error_type=kind)
                return ModelDescribed(chain=chain)
            case CompactContext():
                return await self._compact(effect)
            case CheckFinish(request=request):
                return await self._check_finish(request)
            case CallModel():
                return await self._call_model(effect)
            case RunTools():
                return await self._run_tools(effect)
        raise _LoopBugError(RuntimeError(f"no interpreter for effect {effect.kind!r}"))

    def _model_options(self) -> dict[str, Any]:
        tuning = self.state.spec.tuning
        return {
            "start_to_close_timeout": timedelta(seconds=tuning.model_start_to_close),
            "heartbeat_timeout": timedelta(seconds=tuning.model_heartbeat),
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=tuning.model_initial_retry),
                maximum_interval=timedelta(seconds=tuning.model_max_retry),
                maximum_attempts=tuning.model_max_attempts,
                non_retryable_error_types=MODEL_NON_RETRYABLE,
            ),
        }

    async def _check_finish(self, request: CheckFinishInput) -> Outcome:
        try:
            verdict = await workflow.execute_activity(
                "check_finish",
                request,
                result_type=FinishVerdict,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError as exc:
            _reraise_cancellation(exc)
            verdict = FinishVerdict(refusal=f"the finish guard failed: {_describe(exc)[1]}")
        return FinishChecked(verdict=verdict)

    async def _compact(self, effect: CompactContext) -> Outcome:
        try:
            result = await workflow.execute_activity(
                "compact_context",
                effect.request,
                result_type=CompactResult,
                **self._model_options(),
            )
        except ActivityError as exc:
            _reraise_cancellation(exc)
            return CompactionFailed(error=_describe(exc)[1])
        return ContextCompacted(result=result)

    async def _call_model(self, effect: CallModel) -> Outcome:
        try:
            reply = await workflow.execute_activity(
                "call_model", effect.request, result_type=ModelReply, **self._model_options()
            )
        except ActivityError as exc:
            _reraise_cancellation(exc)
            kind, message = _describe(exc)
            return ModelFailed(error=message, error_type=kind)
        return ModelReplied(reply=reply)

    async def _run_tools(self, effect: RunTools) -> Outcome:
        gate = asyncio.Semaphore(effect.concurrency)
        tuning = self.state.spec.tuning

        async def one(call: RunToolInput, timeout: float) -> ToolOutcome:
            async with gate:
                try:
                    result: ToolOutcome = await workflow.execute_activity(
                        "run_tool",
                        call,
                        result_type=TOOL_OUTCOME,
                        start_to_close_timeout=timedelta(seconds=timeout),
                        heartbeat_timeout=timedelta(seconds=tuning.tool_heartbeat),
                        retry_policy=RetryPolicy(maximum_attempts=tuning.tool_max_attempts),
                    )
                    return result
                except ActivityError as exc:
                    _reraise_cancellation(exc)
                    kind, message = _describe(exc)
                    failure = "timeout" if kind == "timeout" else "error"
                    return ToolFailed(call_id=call.call_id, failure=failure, error=message)

        results = await asyncio.gather(
            *(one(c, t) for c, t in zip(effect.calls, effect.timeouts, strict=True))
        )
        return ToolsFinished(results=tuple(results))


def _reraise_cancellation(exc: ActivityError) -> None:
    """An activity cancelled because the run was cancelled is the run's cancellation."""
    if is_cancelled_exception(exc):
        raise asyncio.CancelledError from exc


def _describe(exc: ActivityError) -> tuple[str, str]:
    """A short kind and a clear message for an activity that failed for good."""
    cause = exc.cause
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "unknown"
        return "timeout", f"timed out ({kind})"
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    return type(cause).__name__ if cause else "ActivityError", str(cause or exc)


class _LoopBugError(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause

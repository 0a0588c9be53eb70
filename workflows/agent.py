"""`AgentWorkflow`: the Temporal interpreter of the pure loop in `capstan.core.loop`.

It turns effects into activities and signals into outcomes, and nothing else: every decision is
the loop's. Deterministic by law: no clock, random, IO or environment here (ruff bans them).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.converter import PayloadConverter
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    is_cancelled_exception,
)
from temporalio.workflow import ContinueAsNewVersioningBehavior

with workflow.unsafe.imports_passed_through():
    from capstan.core import (
        delegation,
        inputs,
        limits,
        loop,
        overflow,
        # jsonschema, loaded with the workflow (clients never load it): the gate validates tool
        # arguments with it, and the sandbox refuses a module first imported after the load
        schema_engine,  # noqa: F401
    )
    from capstan.core.activity_io import RunToolInput
    from capstan.core.activity_names import ActivityName
    from capstan.core.activity_table import ACTIVITIES
    from capstan.core.agent_input import AgentInput
    from capstan.core.children import ChildEnded, Delegation
    from capstan.core.content import preview_of
    from capstan.core.effects import (
        ActivityEffect,
        AwaitInput,
        Boundary,
        CallModel,
        CancelRequested,
        CheckFinish,
        CompactContext,
        ContinueAsNew,
        DescribeModel,
        Effect,
        Finish,
        InputRefused,
        LoadTools,
        Outcome,
        RunTools,
        SpillMessages,
        Steered,
        TakeMessages,
        ToolsFinished,
    )
    from capstan.core.limits import INBOX_MESSAGES, HistoryGauge
    from capstan.core.model_errors import ModelErrorKind
    from capstan.core.models import model_queue
    from capstan.core.patches import Patch
    from capstan.core.planner import model_description
    from capstan.core.spec import CAPACITY, STATUS_DIAGNOSTICS, RunResult, RunStatus, TerminalReason
    from capstan.core.state import RunState
    from capstan.core.steering import (
        STEER,
        Ack,
        LiveMessage,
        PendingView,
        SteeringInput,
        SteeringPayload,
        by_signal,
        decode_input,
        describe_invalid,
    )
    from capstan.core.tooling import ToolFailed, ToolOutcome
    from capstan.core.workflow_io import (
        REQUESTS_MEMO,
        TERMINAL_MEMO,
        WORKFLOW_NAME,
        OpenRequests,
        Query,
        TranscriptView,
    )

from capstan.workflows.activity_options import heartbeat_timeout, retry_policy
from capstan.workflows.children import Children
from capstan.workflows.patching import deprecate, patched
from capstan.workflows.webhook_starts import announced_before, notify_opened

__all__ = ["AgentWorkflow", "input_of"]

#: the activities that call a model, which a limited profile's queue serves
_MODEL_CALLS = frozenset({ActivityName.CALL_MODEL, ActivityName.COMPACT_CONTEXT})


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """One agent run.

    Steering: one `steer` signal (durable even with no worker running) and one `steer` update
    (validated and acknowledged) over every input in `capstan.core.steering`; the per-input
    signal names from before are still accepted. Queries: `status`, `transcript`, `pending`.
    """

    @workflow.init
    def __init__(self, start: AgentInput) -> None:
        self.state: RunState = start.carried or loop.initial_state(
            start.spec, start.spec.run_id or workflow.info().workflow_id
        )
        self._inputs = 0  # bumped by every accepted input; wakes AwaitInput
        self._capacity_waits = 0  # model calls waiting out a provider's pushback
        self._signals = 0  # signals and updates this execution received (Temporal limits them)
        self._updates = 0
        self._limits_off = False  # replaying a run recorded before Patch.LIMITS
        self._announced: list[str] = []  # the request ids the memo lists now
        self._bug: _LoopBugError | None = None  # a loop error met inside a signal handler
        self._children = Children()  # the children (`delegate`) running now
        #: the model description started beside the tool listing (Patch.PARALLEL_START)
        self._describing: tuple[DescribeModel, asyncio.Future[Outcome]] | None = None

    @workflow.run
    async def run(self, start: AgentInput) -> RunResult:
        if start.carried is None:
            # Retired: every run has tool policy, context management and guards. Histories that
            # carry these markers still replay; the calls go once none is left running.
            deprecate(Patch.TOOL_POLICY)
            deprecate(Patch.CONTEXT)
            deprecate(Patch.GUARDS)
        # every execution asks (a continued one starts fresh, so it takes the new rules)
        legacy_policy = not patched(Patch.LEAST_PRIVILEGE)
        if legacy_policy != self.state.legacy_policy:
            self.state = dataclasses.replace(self.state, legacy_policy=legacy_policy)
        if not patched(Patch.COMPACTION):  # recorded before compaction hysteresis
            context = dataclasses.replace(self.state.context, hysteresis=False)
            self.state = dataclasses.replace(self.state, context=context)
        return await self._main(start)

    async def _main(self, start: AgentInput) -> RunResult:
        try:
            while True:
                if self._bug is not None:
                    raise self._bug
                self._fold(Boundary(now=workflow.now()))
                effect = self._next_effect()
                if isinstance(effect, Finish):
                    self._ended(effect.result)
                    return effect.result
                if isinstance(effect, ContinueAsNew):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    carried = loop.carry_over(self.state)
                    # a pinned run (CAPSTAN_DEPLOYMENT) moves to the current build here
                    workflow.continue_as_new(
                        AgentInput(spec=start.spec, carried=carried),
                        initial_versioning_behavior=ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
                    )
                self._announce_requests()
                if isinstance(effect, AwaitInput):
                    self._gauge_waiting()
                    await self._await_input(effect)
                    self._gauge_waiting()
                    continue
                if isinstance(effect, SpillMessages):
                    # on the way to the end or a continue-as-new, a cancel included: never cut
                    self._fold(await self._perform(effect))
                    continue
                outcome = await self._perform_unless_cancelled(effect)
                if outcome is not None:
                    self._fold(outcome)
        except asyncio.CancelledError:
            # A Temporal cancellation request: end with a result, not a failure.
            self._fold(CancelRequested(reason="cancellation requested through Temporal"))
            return self._ended(await self._final())
        except _LoopBugError as bug:
            workflow.logger.exception("loop raised; ending the run as failed")
            return self._ended(self._failed(bug))

    # Steering: one signal and one update over the registry's union ---------------------------
    #
    # Both handlers are dynamic: they take every signal and update as raw payloads and decode
    # them here (`input_of`), so any payload of any shape from any Temporal client (no
    # argument, two, `null`, `{}`, a wrong `kind`, unknown fields) is either one valid input or a
    # recorded diagnostic that changes nothing. A typed handler would let the SDK decode the
    # payload: it drops what fails with only a log line, fails the workflow task on a wrong
    # argument count, and (it strips `Annotated`) reads `{}` as the first union member that
    # takes it, a pause.

    @workflow.signal(dynamic=True)
    def steer(self, name: str, args: Sequence[RawValue]) -> None:
        """Every steering input under `steer` (durable the moment the server accepts it, no
        worker needed), and the per-input signals from before it (older clients, stored
        histories); anything else is noted in the diagnostics and changes nothing else."""
        self._signals += 1
        item, problem = input_of(name, args)
        if item is None:
            self._fold(InputRefused(problem=problem))
            return
        self._steer(item)

    @workflow.update(dynamic=True)
    def steer_checked(self, name: str, args: Sequence[RawValue]) -> Ack:
        """The same inputs, validated first: a rejection writes nothing to history."""
        self._updates += 1
        item, _ = input_of(name, args)
        assert item is not None  # the validator refused anything else
        return self._steer(item)

    @steer_checked.validator
    def _check_steer(self, name: str, args: Sequence[RawValue]) -> None:
        item, problem = input_of(name, args)
        if item is None:
            raise ValueError(problem)
        self._validate(item)

    @workflow.query(name=Query.STATUS.value)
    def status(self) -> RunStatus:
        status = loop.status(self.state)
        if self._capacity_waits:
            return status.model_copy(update={"waiting_for": [*status.waiting_for, CAPACITY]})
        return status

    @workflow.query(name=Query.PENDING.value)
    def pending(self) -> PendingView:
        return self.state.pending_view()

    @workflow.query(name=Query.TRANSCRIPT.value)
    def transcript(self) -> TranscriptView:
        return TranscriptView(
            conversation=self.state.conversation.head,
            pending=list(self.state.conversation.pending),
            in_flight=list(self.state.turn.calls),
            step=self.state.step,
            records=list(self.state.steering.records),
            diagnostics=list(self.state.diagnostics),
            # a flood may hold thousands inline: the view stays one small payload
            inbox=list(self.state.steering.inbox[:INBOX_MESSAGES]),
            messages_waiting=self.state.steering.messages_waiting,
        )

    def _validate(self, item: SteeringInput) -> None:
        if inputs.is_duplicate(self.state, item):
            return  # acknowledged as a duplicate, not rejected
        # validators never run in a replay, so a new update meets the rules of new code (the
        # handler then records Patch.INBOX_QUEUE if it takes the inbox past its bound)
        problem = inputs.check(overflow.allowing(self.state), item)
        if problem is not None:
            raise ValueError(problem)

    def _steer(self, item: SteeringInput) -> Ack:
        if inputs.is_duplicate(self.state, item):
            return Ack(applied=False, detail=f"duplicate id {item.id!r}: already applied")
        if (
            isinstance(item, LiveMessage)
            and overflow.at_bound(self.state)
            and patched(Patch.INBOX_QUEUE)
        ):
            # from here on the run keeps what its inbox cannot hold (recorded the first time
            # the bound is reached: a run that never sees a flood records nothing)
            self.state = overflow.allowing(self.state)
        try:
            self._fold(Steered(input=item))
        except _LoopBugError as bug:
            # a raising handler would fail its workflow task again and again: the run ends
            # `failed` at its next step instead
            self._bug = bug
        self._inputs += 1
        return Ack(applied=True)

    def _ended(self, result: RunResult) -> RunResult:
        """Count the run by terminal reason (the metric meter is silent during replay) and
        write the reason to the memo, where listings read it."""
        counter = workflow.metric_meter().create_counter("capstan_runs_ended", "runs")
        counter.add(1, {"terminal_reason": result.terminal_reason.value})
        if patched(Patch.TERMINAL_MEMO):
            workflow.upsert_memo({TERMINAL_MEMO: result.terminal_reason.value})
        return result

    def _announce_requests(self) -> None:
        """Keep the open approval requests and questions in the memo: that puts them in history
        (for audits and the event stream) and lets clients see them with no worker running.
        Each request not announced before is posted to the worker's webhooks, unawaited."""
        opened = [r.request_id for r in self.state.turn.approvals]
        opened += [q.request_id for q in self.state.turn.questions]
        if opened == self._announced or not patched(Patch.ANNOUNCE):
            return
        announced = announced_before()  # the memo, before this upsert
        self._announced = opened
        requests = OpenRequests(
            approvals=list(self.state.turn.approvals), questions=list(self.state.turn.questions)
        )
        workflow.upsert_memo({REQUESTS_MEMO: requests})
        catalog = self.state.catalog
        kinds = catalog.notify if catalog is not None else None
        notify_opened(self.state.run_id, requests, announced, self.state.spec.tuning, kinds)

    def _gauge_waiting(self) -> None:
        gauge = workflow.metric_meter().create_gauge("capstan_approvals_waiting", "requests")
        gauge.set(len(self.state.turn.approvals), {"run_id": self.state.run_id})

    async def _await_input(self, effect: AwaitInput) -> None:
        """Wait durably until an input arrives, the earliest expiry passes, or the history
        nears Temporal's limits (the loop then continues as new)."""
        seen = self._inputs
        timeout = None
        if effect.until is not None:
            timeout = max((effect.until - workflow.now()).total_seconds(), 0.001)
        # on timeout, the next Boundary settles the expiry
        with contextlib.suppress(builtins.TimeoutError):
            await workflow.wait_condition(
                lambda: self._inputs != seen or self._history_full(), timeout=timeout
            )

    def _history_full(self) -> bool:
        return not self._limits_off and limits.must_continue(self._gauge())

    def _gauge(self) -> HistoryGauge:
        """How full this execution's history is (deterministic: as of the current task)."""
        info = workflow.info()
        return HistoryGauge(
            events=info.get_current_history_length(),
            size_bytes=info.get_current_history_size(),
            signals=self._signals,
            updates=self._updates,
            suggested=info.is_continue_as_new_suggested(),
        )

    # Interpreter -----------------------------------------------------------------------------

    def _next_effect(self) -> Effect:
        gauge = self._gauge()
        suggested = gauge.suggested
        try:
            effect = loop.next_effect(
                self.state, continue_suggested=suggested, history=gauge, wait_fresh=True
            )
            if (
                isinstance(effect, ContinueAsNew)
                and effect.before_wait
                and not patched(Patch.WAIT_FRESH)
            ):
                effect = loop.next_effect(self.state, continue_suggested=suggested, history=gauge)
            if (
                isinstance(effect, ContinueAsNew)
                and not effect.before_wait
                and not self._limits_apply(gauge)
            ):
                effect = loop.next_effect(self.state, continue_suggested=suggested)
        except Exception as exc:
            raise _LoopBugError(exc) from exc
        return effect

    def _limits_apply(self, gauge: HistoryGauge) -> bool:
        """Whether a continue-as-new the history limits call for may happen: always when the
        rules before Patch.LIMITS call for it too, else in runs recorded with the patch."""
        if self._limits_off:
            return False
        before = loop.next_effect(self.state, continue_suggested=gauge.suggested)
        if isinstance(before, ContinueAsNew) or patched(Patch.LIMITS):
            return True
        self._limits_off = True
        return False

    def _fold(self, outcome: Outcome) -> None:
        try:
            self.state = loop.apply(self.state, outcome)
        except Exception as exc:
            raise _LoopBugError(exc) from exc

    async def _final(self) -> RunResult:
        """The result of a run Temporal cancelled: what it cannot hold inline is kept first
        (activities scheduled after the cancellation run to their end)."""
        while isinstance(effect := loop.next_effect(self.state), SpillMessages):
            self._fold(await self._perform(effect))
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
            diagnostics=self.state.diagnostics[-STATUS_DIAGNOSTICS:],
            continued=self.state.segment.continued,
        )

    async def _perform_unless_cancelled(self, effect: Effect) -> Outcome | None:
        """Perform `effect`; a `cancel` signal arriving meanwhile cancels its activities (tools
        learn it through their heartbeats) and the run ends at once with its partial result."""
        work = asyncio.ensure_future(self._perform(effect))
        await workflow.wait_condition(
            lambda: work.done() or self.state.steering.cancel_reason is not None
        )
        if work.done() or not patched(Patch.CANCEL_IN_FLIGHT):
            return await work
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return None

    async def _perform(self, effect: Effect) -> Outcome:
        match effect:
            case RunTools():
                return await self._run_tools(effect)
            case LoadTools():
                self._describe_early()
                return await self._perform_activity(effect)
            case DescribeModel() if self._describing is not None:
                started, outcome = self._describing
                self._describing = None
                if started == effect:
                    return await outcome
                return await self._perform_activity(effect)
            case (
                DescribeModel()
                | CompactContext()
                | CheckFinish()
                | CallModel()
                | SpillMessages()
                | TakeMessages()
            ):
                return await self._perform_activity(effect)
        raise _LoopBugError(RuntimeError(f"no interpreter for effect {effect.kind!r}"))

    def _describe_early(self) -> None:
        """Start `describe_model` beside `list_tools`: the loop asks for it right after the
        listing, with an input that only the spec decides. Its outcome waits here until then (a
        run that ends first, on a failed listing or a cancel, leaves it unread)."""
        if self._describing is None and patched(Patch.PARALLEL_START):
            early = model_description(self.state)
            self._describing = (early, asyncio.ensure_future(self._perform_activity(early)))

    async def _perform_activity(self, effect: ActivityEffect) -> Outcome:
        """One activity, as the table in `capstan.core.activity_table` defines it. A model call
        the provider pushed back on through all its retries waits and is called again: a run
        never fails because its provider is at capacity (`waits_for_capacity`)."""
        while True:
            try:
                result = await self._execute(effect.activity, effect.request)
            except ActivityError as exc:
                _reraise_cancellation(exc)
                kind, message = _describe(exc)
                if not self._waits_for_capacity(effect, kind):
                    return effect.failed(kind, message)
                self._capacity_waits += 1
                try:
                    await workflow.sleep(self.state.spec.tuning.model_capacity_wait)
                finally:
                    self._capacity_waits -= 1
                continue
            return effect.succeeded(result)

    def _waits_for_capacity(self, effect: ActivityEffect, kind: str) -> bool:
        """A model call refused for capacity (429) with no fallback model left to switch to."""
        if effect.activity is not ActivityName.CALL_MODEL or kind != ModelErrorKind.RATE_LIMITED:
            return False
        chain = self.state.context.model_chain
        if chain is not None and self.state.context.model_index + 1 < len(chain.models):
            return False  # the loop switches to the next model (`context.on_model_failed`)
        if workflow.info().is_continue_as_new_suggested():
            return False  # days of refusals: end `model_error` before the history's limits
        return patched(Patch.PROVIDER_CAPACITY)

    async def _execute(self, name: ActivityName, arg: Any, timeout: float | None = None) -> Any:
        spec = ACTIVITIES[name]
        options = spec.options(self.state.spec.tuning, timeout)
        return await workflow.execute_activity(
            name.value,
            arg,
            task_queue=self._queue_of(name, arg),
            result_type=spec.result,
            start_to_close_timeout=timedelta(seconds=options.start_to_close),
            heartbeat_timeout=heartbeat_timeout(options),
            retry_policy=retry_policy(options),
        )

    def _queue_of(self, name: ActivityName, arg: Any) -> str | None:
        """The queue of a model call whose profile has limits (the server paces it for the
        fleet, `capstan.core.models.model_queue`); None (the run's own) for everything else.
        Decided by `describe_model`'s recorded answer, so a replay routes it the same way."""
        chain = self.state.context.model_chain
        if name not in _MODEL_CALLS or chain is None:
            return None
        for model in chain.models:
            if model.profile == arg.profile and model.own_queue:
                return model_queue(workflow.info().task_queue, model.profile)
        return None

    async def _run_tools(self, effect: RunTools) -> Outcome:
        gate = asyncio.Semaphore(effect.concurrency)

        async def one(call: RunToolInput, timeout: float) -> ToolOutcome:
            async with gate:
                try:
                    result: ToolOutcome = await self._execute(ActivityName.RUN_TOOL, call, timeout)
                    return result
                except ActivityError as exc:
                    _reraise_cancellation(exc)
                    kind, message = _describe(exc)
                    failure = "timeout" if kind == "timeout" else "error"
                    return ToolFailed(call_id=call.call_id, failure=failure, error=message)

        async def child(work: Delegation) -> ChildEnded:
            async with gate:
                return await self._children.run(work)

        forwarding = self._start_children(effect)
        try:
            results = await asyncio.gather(
                *(one(c, t) for c, t in zip(effect.calls, effect.timeouts, strict=True)),
                *(child(d) for d in effect.children),
            )
        finally:
            if forwarding is not None:
                forwarding.cancel()
        tools = tuple(r for r in results if not isinstance(r, ChildEnded))
        ended = tuple(r for r in results if isinstance(r, ChildEnded))
        return ToolsFinished(results=tools, children=ended)

    def _start_children(self, effect: RunTools) -> asyncio.Future[None] | None:
        """For a turn that delegates: list its children in the memo, and forward pausing and
        resuming this run to them while they run (the returned task; cancel it after)."""
        if not effect.children:
            return None
        started = tuple(d.child for d in effect.children)
        self._children.announce(delegation.remember(self.state, started))
        return asyncio.ensure_future(
            self._children.forward_pause(
                lambda: self.state.steering.paused,
                lambda: f"{self.state.run_id}/{self.state.step}",
            )
        )


def input_of(
    name: str, args: Sequence[RawValue], converter: PayloadConverter | None = None
) -> tuple[SteeringPayload | None, str]:
    """Decode a signal or update as one steering input (by `kind` under `steer`, by its name
    under a per-input name from before it), or say in one line why it is not one. `converter`
    defaults to the workflow's own (tests pass one outside a workflow)."""
    kind = None if name == STEER else by_signal(name)
    if name != STEER and kind is None:
        return None, f"unknown {preview_of(name, 80)!r} ignored"
    if len(args) != 1:
        return None, f"malformed {name!r} ignored: {len(args)} arguments (one input expected)"
    try:
        data = (converter or workflow.payload_converter()).from_payload(args[0].payload, Any)
    except Exception as exc:
        return None, f"malformed {name!r} ignored: not JSON ({type(exc).__name__})"
    try:
        item = decode_input(data) if kind is None else kind.model_validate(data)
    except ValidationError as exc:
        return None, f"malformed {name!r} ignored: {describe_invalid(exc)}"
    return item, ""


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

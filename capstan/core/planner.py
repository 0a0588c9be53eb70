"""What a run does next: the loop's planner, one procedure in the order of an iteration.

(Named apart from a reviewer's `Decision` on an approval, `capstan.core.steering`.)

Pure and read-only: it looks at the state and names the next effect, or, when the run must end
now and its state does not say so yet, the `Ending` that the boundary fold records (see
`capstan.core.loop`). It never builds a new state, so deciding twice decides the same.

The boundary fold decides without the interpreter's `continue_suggested` hint, so an end that is
due (a request too long for the window, a budget the next call would cross) is recorded before a
continue-as-new that only the history's length suggests: the run ends instead of continuing to
end at once. A continue-as-new every `continue_as_new_every` steps still comes first.

The interpreter also passes how full its history is (`HistoryGauge`): a run about to wait (for
resume, a decision, an answer, a grant) continues as new first when Temporal's limits are near
or Temporal suggests it, and any run does at its next step near the limits, so a flood of
signals to a waiting run can never reach the point where Temporal refuses the next one. A run
about to wait for a person continues as new first once its execution has taken a step
(`waits_fresh`), when the interpreter passes `wait_fresh` (runs recorded with `wait-fresh-v1`).
"""

from __future__ import annotations

from typing import assert_never

from capstan.core import budgets, context, delegation, limits, overflow, policy
from capstan.core.activity_io import (
    CallModelInput,
    CheckFinishInput,
    DescribeModelInput,
    ListToolsInput,
    RunToolInput,
)
from capstan.core.content import BlobRef, Text
from capstan.core.effects import (
    AwaitInput,
    CallModel,
    CheckFinish,
    CompactContext,
    ContinueAsNew,
    DescribeModel,
    Effect,
    Finish,
    LoadTools,
    RunTools,
)
from capstan.core.finish import finish_answer
from capstan.core.gate import open_requests
from capstan.core.limits import HistoryGauge
from capstan.core.messages import ToolCall
from capstan.core.spec import SANDBOX_TOOLS, STATUS_DIAGNOSTICS, RunResult, TerminalReason
from capstan.core.state import Ending, RunState
from capstan.core.tooling import ToolInfo
from capstan.core.turns import finish_hooked

__all__ = ["model_description", "plan", "result", "waits_fresh"]


def plan(
    state: RunState,
    continue_suggested: bool,
    history: HistoryGauge | None = None,
    wait_fresh: bool = False,
) -> Effect | Ending:
    """The planner, in the order of the iteration. An `Ending` means the run
    must end now and its state does not say so yet: the boundary fold records it. With
    `wait_fresh` (runs recorded with the rule), `waits_fresh` applies."""
    planned = _plan(state, continue_suggested, history)
    if isinstance(planned, AwaitInput):
        if limits.must_continue(history):
            planned = ContinueAsNew()  # wait in a fresh execution: the inputs still to come fit
        elif wait_fresh and waits_fresh(state):
            planned = ContinueAsNew(before_wait=True)
    if isinstance(planned, ContinueAsNew | Finish):
        # what the carried state or the result cannot hold inline goes to the blob store first
        return overflow.spill_request(state, planned) or planned
    return planned


def waits_fresh(state: RunState) -> bool:
    """Whether a run about to wait for a person (a decision, an answer) continues as new first:
    when this execution has taken a step. A wait may last days, and a worker's cache does not
    keep a waiting run that long under load; the task that delivers the decision then replays
    the execution from its start, and that grows with its history (approving a run evicted
    after 12 steps took 52 ms against 14 ms cached; after 0 steps, 22 ms). Waiting in a fresh
    execution keeps that replay a handful of events whatever the run did before. It cannot
    loop: the fresh execution has taken no step, and inputs while waiting take none."""
    return state.segment.steps > 0 and bool(state.turn.approvals or state.turn.questions)


def _plan(
    state: RunState, continue_suggested: bool, history: HistoryGauge | None
) -> Effect | Ending:
    if state.ending is not None:
        return Finish(result=result(state))
    if state.steering.cancel_reason is not None:
        return Ending(reason=TerminalReason.CANCELLED, error=state.steering.cancel_reason)
    spent = budgets.exhausted(state, before_model_call=False)
    # a typed run's answer already given is checked first: the reply that spent the budget may
    # be a valid answer (untyped runs keep their recorded order: a finish hook's check after)
    typed_answer = state.guards.finish_pending is not None and state.spec.output_schema
    spending = spent is not None and (spent[0] == "wall_seconds" or state.phase == "thinking")
    if spent is not None and spending and not typed_answer:
        return _budget_spent(state, spent)
    if state.steering.paused:
        return AwaitInput(waiting_for=("resume",), until=budgets.deadline(state))
    match state.phase:
        case "starting":
            if state.catalog is None:
                return LoadTools(request=_listing(state))
            return model_description(state)
        case "thinking":
            return _thinking(state, continue_suggested, history)
        case "acting":
            return _acting(state)
        case "finished":
            return Finish(result=result(state))
        case _:
            assert_never(state.phase)


def model_description(state: RunState) -> DescribeModel:
    """The model description a run starts with. The spec alone decides it, so the workflow
    may start it beside the tool listing that the loop asks for first."""
    return DescribeModel(request=DescribeModelInput(profile=state.spec.model))


def _thinking(
    state: RunState, continue_suggested: bool, history: HistoryGauge | None
) -> Effect | Ending:
    """A finish awaiting its check, step limit, continue-as-new, compaction, the model call."""
    if state.guards.finish_pending is not None:
        return CheckFinish(request=_finish_check(state, state.guards.finish_pending))
    if state.awaiting_steps:
        return AwaitInput(waiting_for=("steps",))
    if state.step >= state.step_limit:
        return Ending(reason=TerminalReason.MAX_STEPS, error=f"stopped after {state.step} steps")
    segment = state.segment.steps
    if segment >= state.spec.continue_as_new_every or (continue_suggested and segment > 0):
        return ContinueAsNew()
    if limits.crowded(history) is not None:
        return ContinueAsNew()
    if take := overflow.take_request(state):  # before the window is measured: it adds to it
        return take
    plan = context.plan(state)
    if plan == "reject":
        needed = context.estimate_request(state)
        usable = state.model.usable_window if state.model else 0
        problem = f"the next request needs ~{needed} tokens; the model allows {usable}"
        return Ending(reason=TerminalReason.PROMPT_TOO_LONG, error=problem)
    if plan is not None:
        return CompactContext(request=context.compact_request(state, plan))
    if spent := budgets.exhausted(state, before_model_call=True):
        return _budget_spent(state, spent)
    return CallModel(request=_model_request(state))


def _acting(state: RunState) -> Effect:
    if state.turn.approvals or state.turn.questions:
        times = [r.expires_at for r in open_requests(state)]
        if (wall := budgets.deadline(state)) is not None:
            times.append(wall)
        return AwaitInput(waiting_for=tuple(state.waiting_for()), until=min(times))
    return _run_tools(state)


def _budget_spent(state: RunState, spent: tuple[str, str]) -> AwaitInput | Ending:
    """End the run naming the budget, or wait for a grant when the run asks for that."""
    name, detail = spent
    if state.spec.budgets.wait_for_grant and name != "wall_seconds":
        return AwaitInput(waiting_for=(f"budget:{name}",), until=budgets.deadline(state))
    return Ending(reason=TerminalReason.BUDGET_EXHAUSTED, error=detail)


def _finish_check(state: RunState, call: ToolCall) -> CheckFinishInput:
    """What the worker checks of a `finish`: the answer for its hook, or for a typed run the
    call's whole arguments against the output schema (the hook too, until it has refused)."""
    schema = state.spec.output_schema
    if schema is None:
        answer, _ = finish_answer(call)
        return CheckFinishInput(run_id=state.run_id, step=state.step, answer=answer)
    return CheckFinishInput(
        run_id=state.run_id,
        step=state.step,
        answer=call.arguments,
        output_schema=schema,
        hook=finish_hooked(state),
    )


def _model_request(state: RunState) -> CallModelInput:
    assert state.catalog is not None
    policy = state.spec.context
    return CallModelInput(
        run_id=state.run_id,
        step=state.step + 1,
        profile=state.profile,
        conversation=state.conversation.head,
        new_messages=state.conversation.pending,
        tools=state.catalog.specs_ref,
        observation_max_chars=state.spec.observation_max_chars,
        tool_result_max_tokens=policy.tool_result_max_tokens,
        tool_result_window_share=policy.tool_result_window_share,
        tool_result_max_lines=policy.tool_result_max_lines,
        tool_result_max_bytes=policy.tool_result_max_bytes,
        workspace=state.spec.workspace,
    )


def _listing(state: RunState) -> ListToolsInput:
    """The run's tools; `delegate` is offered (by the listing) when the run may delegate."""
    delegates = delegation.offered(state.spec)
    outputs = {n: state.spec.delegates[n].output_schema for n in delegates}
    return ListToolsInput(
        allowed=state.spec.allowed_tools,
        delegates=delegates,
        output_schema=state.spec.output_schema,
        delegate_outputs={n: schema for n, schema in outputs.items() if schema is not None},
    )


def _unread_denials(
    state: RunState, name: str, arguments: Text
) -> tuple[tuple[str, str], ...] | None:
    """The deny patterns `run_tool` must check itself: for arguments stored as a ref, which the
    gate could not read (None when they are inline: the gate checked them)."""
    assert state.catalog is not None
    if not isinstance(arguments, BlobRef):
        return None
    info = state.catalog.tools.get(name, ToolInfo())
    return policy.deny_patterns(name, info, state.spec, state.legacy_policy) or None


def _run_tools(state: RunState) -> RunTools:
    assert state.catalog is not None
    turn = state.turn
    decided = {d.call_id for d in turn.decided}
    runnable = tuple(c for c in turn.calls if c.id not in decided)
    children = delegation.plan(state, runnable)
    delegated = {d.call_id for d in children}
    to_run = tuple(c for c in runnable if c.id not in delegated)
    default_timeout = state.spec.tuning.tool_default_timeout
    return RunTools(
        calls=tuple(
            RunToolInput(
                run_id=state.run_id,
                step=state.step,
                call_id=c.id,
                name=c.name,
                arguments=turn.approved_args.get(c.id, c.arguments),
                idempotency_key=f"{_key_scope(state)}/{state.step}/{c.id}",
                sandbox=state.spec.sandbox if c.name in SANDBOX_TOOLS else None,
                deny_patterns=_unread_denials(
                    state, c.name, turn.approved_args.get(c.id, c.arguments)
                ),
                workspace=state.spec.workspace,
            )
            for c in to_run
        ),
        concurrency=state.spec.tool_concurrency,
        timeouts=tuple(state.catalog.timeout_for(c.name, default_timeout) for c in to_run),
        children=children,
    )


def result(state: RunState) -> RunResult:
    """The run's result, once its end is recorded."""
    assert state.ending is not None
    inbox, unread, lost = overflow.unread(state)
    diagnostics = state.diagnostics if lost is None else (*state.diagnostics, lost)
    return RunResult(
        run_id=state.run_id,
        terminal_reason=state.ending.reason,
        output=state.ending.output,
        output_format=state.ending.output_format,
        error=state.ending.error,
        steps=state.step,
        usage=state.usage,
        # a thread's next run continues from here: messages drained or not are all kept
        conversation=state.conversation.head,
        tail=state.conversation.pending + inbox,
        context_tokens=state.context.tokens,
        diagnostics=diagnostics[-STATUS_DIAGNOSTICS:],
        unread=unread,
        continued=state.segment.continued,
    )


def _key_scope(state: RunState) -> str:
    """What makes a tool call's idempotency key unique to this run: its id, and for a thread's
    later runs (which share the workflow id and count steps from 0 again) the head it goes on
    from, so two runs of a thread never share a key."""
    if state.spec.continues is None:
        return state.run_id
    return f"{state.run_id}@{state.spec.continues.sha256[:12]}"

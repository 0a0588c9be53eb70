"""The ReAct loop as a pure state machine: state + outcome of the last effect -> next effect.

This module owns every transition of a run: `next_effect` reads the state and decides, `apply`
folds an outcome in and is the only writer, moving the phase and recording the end through
`capstan.core.transitions`. The helpers it calls (gate, turn checks, guards, budgets, context
planning, the steering fold) return verdicts. It never does IO, never reads a clock, the
environment or a random source, and never imports Temporal: the workflow (`workflows.agent`) and
the scripted driver of the unit tests are thin interpreters of it.

One iteration, in order:

1. Boundary (the interpreter folds `Boundary(now)` before every decision): expired approvals are
   settled; live messages are drained into the next model request; then the end the rules call
   for is recorded in the state (a requested cancellation, a spent budget, the step limit, a
   request too long for the window), so `status` shows a finished run as finished. A paused run
   waits for `resume`; at the step limit a run that asks for it waits for `grant_steps`; a long
   segment asks for continue-as-new, and so does a run about to wait when its history nears
   Temporal's limits (`capstan.core.limits`).
2. Think: `CallModel` with the conversation head and the messages since then.
3. Check the turn: a text-only reply completes the run (`text` mode) or gets a bounded nudge
   (`tool` mode); `finish` alone with a valid answer completes the run.
4. Gate (`capstan.core.gate`): unknown tools, policy denials and a `finish` mixed with other calls
   become observations at once; calls that need a human open approval requests or questions,
   and the run waits (`AwaitInput`) until each is decided, answered or expired.
5. Act: `RunTools` for the approved calls, with edited arguments where a reviewer edited them;
   `delegate` calls become child runs in the same effect, with their specs and carved budgets
   (`capstan.core.delegation`).
6. Observe: every call of the turn gets exactly one tool message, in the turn's order;
   untrusted output is marked for fencing. A child's end is its call's observation, and what
   the child spent is charged to this run.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from capstan.core import context, delegation, nudges, overflow
from capstan.core.activity_io import ModelReply
from capstan.core.children import ChildEnded
from capstan.core.content import Text
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CancelRequested,
    CompactionFailed,
    ContextCompacted,
    Effect,
    FinishChecked,
    InboxUnavailable,
    InputRefused,
    MessagesSpilled,
    MessagesTaken,
    ModelDescribed,
    ModelFailed,
    ModelReplied,
    Outcome,
    Steered,
    ToolsFinished,
    ToolsLoaded,
    ToolsUnavailable,
)
from capstan.core.finish import finish_answer
from capstan.core.gate import expire_requests, gate_turn
from capstan.core.inputs import apply_input, note_refused
from capstan.core.limits import HistoryGauge
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.planner import plan
from capstan.core.policy import rule_of_two_applies
from capstan.core.spec import FinishMode, RunSpec, RunStatus, TerminalReason
from capstan.core.state import (
    MAX_DIAGNOSTICS,
    MAX_RECORDS,
    Conversation,
    Ending,
    RunState,
    Segment,
    Steering,
    Turn,
)
from capstan.core.steering import ApprovalRecord
from capstan.core.tooling import FINISH_TOOL, ToolFailed, ToolInfo, ToolOutcome, ToolSucceeded
from capstan.core.transitions import (
    IllegalTransitionError,
    act,
    apply_verdict,
    end,
    expect,
    observe,
    think,
)
from capstan.core.turns import (
    finalize_warning,
    finish_hooked,
    finish_refusal,
    guard_reply,
    guard_results,
    on_finish_checked,
)

__all__ = [
    "IllegalTransitionError",
    "apply",
    "carry_over",
    "finish_answer",
    "initial_state",
    "next_effect",
    "observation_text",
    "status",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful agent. Work step by step with the tools you are given. "
    "When the task is done, call `finish` with your final answer."
)


def initial_state(spec: RunSpec, run_id: str) -> RunState:
    """The state of a new run: the system prompt and the task are pending for the first call.

    A run that continues a thread's conversation (`spec.continues`, `continues_tail`) starts
    from that head, where the system prompt already is: the previous run's unflushed tail is
    pending, and the window starts at its size, so the first call compacts if it must. A thread
    run's task arrives as its start signal (signal-with-start delivers it to a running run
    instead), so it is not queued here a second time; a fork's task is in the conversation it
    goes on from (`spec.forked_from`).
    """
    given = spec.thread is not None or spec.forked_from is not None
    task: tuple[Message, ...] = () if given else (Message(role="user", content=spec.task),)
    if spec.continues is not None or spec.continues_tail or spec.continues_unread is not None:
        state = RunState(
            spec=spec,
            run_id=run_id,
            conversation=Conversation(head=spec.continues, pending=spec.continues_tail + task),
        )
        if spec.continues_unread is not None:  # read before the messages sent to this run
            state = replace(state, steering=Steering(queue=spec.continues_unread, spills=True))
        return replace(state, context=replace(state.context, tokens=spec.continues_tokens))
    system = spec.system_prompt or DEFAULT_SYSTEM_PROMPT
    if spec.finish_mode is FinishMode.TEXT and spec.system_prompt is None:
        system = "You are a careful agent. Use tools when needed; reply in plain text when done."
    pending = (Message(role="system", content=system, origin="system"), *task)
    return RunState(spec=spec, run_id=run_id, conversation=Conversation(pending=pending))


def next_effect(
    state: RunState,
    *,
    continue_suggested: bool = False,
    history: HistoryGauge | None = None,
    wait_fresh: bool = False,
) -> Effect:
    """Decide what the run does next. The interpreter performs it and reports the outcome.

    `continue_suggested` is the interpreter's hint that its history is getting long; `history`
    how full it is (signals, updates, events, bytes), so a waiting run continues as new before
    Temporal refuses its inputs; `wait_fresh` lets a run continue as new before it waits for a
    person (`capstan.core.planner.waits_fresh`). Only reads: an end the rules call for was
    recorded by the boundary fold, and deciding on a state where it was not (no `Boundary`
    folded first) is an interpreter bug.
    """
    planned = plan(state, continue_suggested, history, wait_fresh)
    if isinstance(planned, Ending):
        raise IllegalTransitionError(
            f"the run must end ({planned.reason.value}) but no fold recorded it: "
            "fold Boundary before every decision"
        )
    return planned


def apply(state: RunState, outcome: Outcome) -> RunState:
    """Fold the outcome of the last effect (or a steering input) into the state."""
    match outcome:
        case CancelRequested() | Steered() | InputRefused():
            return _on_human(state, outcome)
        case Boundary(now=now):
            return _at_boundary(state, now)
        case ToolsLoaded(catalog=catalog):
            expect(state, ("starting",), outcome.kind)
            rule_of_two = rule_of_two_applies(catalog, state.spec)
            # why a tool source is missing (an MCP server down at listing) shows in `status`
            noted = (*state.diagnostics, *catalog.diagnostics)[-MAX_DIAGNOSTICS:]
            return replace(state, catalog=catalog, rule_of_two=rule_of_two, diagnostics=noted)
        case ToolsUnavailable(error=error):
            expect(state, ("starting",), outcome.kind)
            problem = f"could not list the run's tools: {error}"
            return end(state, Ending(reason=TerminalReason.FAILED, error=problem))
        case ModelDescribed(chain=chain):
            expect(state, ("starting",), outcome.kind)
            return think(replace(state, context=replace(state.context, model_chain=chain)))
        case FinishChecked() | ContextCompacted() | CompactionFailed():
            expect(state, ("thinking",), outcome.kind)
            return _between_calls(state, outcome)
        case ModelReplied(reply=reply):
            expect(state, ("thinking",), outcome.kind)
            return _on_reply(state, reply)
        case ModelFailed(error=error, error_type=error_type):
            expect(state, ("starting", "thinking"), outcome.kind)
            failed = context.on_model_failed(state, error or "the model call failed", error_type)
            return end(state, failed) if isinstance(failed, Ending) else failed
        case ToolsFinished(results=results, children=children):
            expect(state, ("acting",), outcome.kind)
            return _on_tools_finished(state, results, children)
        case MessagesSpilled() | MessagesTaken() | InboxUnavailable():
            return _on_inbox(state, outcome)
        case _:
            assert_never(outcome)


def _on_inbox(
    state: RunState, outcome: MessagesSpilled | MessagesTaken | InboxUnavailable
) -> RunState:
    """Outcomes of the live-message queue in the blob store (`capstan.core.overflow`)."""
    match outcome:
        case MessagesSpilled(count=count, queue=queue):
            # before a continue-as-new (thinking, acting) or the end (any phase)
            return overflow.on_spilled(state, count, queue)
        case MessagesTaken(messages=messages, queue=queue):
            expect(state, ("thinking",), outcome.kind)
            state, taken = overflow.on_taken(state, messages, queue)
            return _queue(state, taken)
        case InboxUnavailable(error=error):
            state = replace(state, steering=overflow.on_failed(state.steering, error))
            if state.ending is not None:
                return note_refused(state, error)
            return end(state, Ending(reason=TerminalReason.FAILED, error=error))
        case _:
            assert_never(outcome)


def status(state: RunState) -> RunStatus:
    """The `status` query: the state's view, with what the run waits for taken from the
    decision the loop would make now (so a spent budget awaiting a grant shows too)."""
    planned = plan(state, continue_suggested=False)
    if isinstance(planned, AwaitInput):
        return state.status(waiting_for=list(planned.waiting_for))
    return state.status()


def carry_over(state: RunState) -> RunState:
    """The state a continued-as-new run starts from."""
    return replace(state, segment=Segment(steps=0, continued=state.segment.continued + 1))


def observation_text(outcome: ToolOutcome) -> Text:
    """What the model sees for one tool outcome."""
    if isinstance(outcome, ToolFailed):
        return f"Error ({outcome.failure}): {outcome.error}"
    return outcome.output


# Folding (the only writer) -----------------------------------------------------------------------


def _on_human(state: RunState, outcome: CancelRequested | Steered | InputRefused) -> RunState:
    """Outcomes that come from people, not from an effect: they may arrive at any time."""
    match outcome:
        case CancelRequested(reason=reason):
            # Temporal cancelled the run: it ends now (a cancel signal before wins the reason)
            if state.ending is not None:
                return state
            why = state.steering.cancel_reason or reason or "cancelled"
            return end(state, Ending(reason=TerminalReason.CANCELLED, error=why))
        case Steered(input=item):
            state, ending = apply_input(state, item)
            return state if ending is None else end(state, ending)
        case InputRefused(problem=problem):
            return note_refused(state, problem)


def _at_boundary(state: RunState, now: datetime) -> RunState:
    """Settle what time decides (expiries), drain live messages before the next model call,
    then record the end the rules call for now, if any."""
    if state.ending is not None:
        return state
    state = expire_requests(replace(state, now=now), now)
    if state.budget.started_at is None:
        state = replace(state, budget=replace(state.budget, started_at=now))
    if state.phase == "thinking" and not state.steering.paused:
        state, drained = overflow.drain(state, state.step)
        if drained:
            state = _queue(state, drained)
    note = finalize_warning(state)
    if note is not None:
        state = _queue(replace(state, guards=replace(state.guards, finalize_warned=True)), (note,))
    planned = plan(state, continue_suggested=False)
    return end(state, planned) if isinstance(planned, Ending) else state


def _queue(state: RunState, messages: tuple[Message, ...]) -> RunState:
    """Add messages to those the next model call sends."""
    pending = state.conversation.pending + messages
    return replace(state, conversation=replace(state.conversation, pending=pending))


def _between_calls(
    state: RunState, outcome: FinishChecked | ContextCompacted | CompactionFailed
) -> RunState:
    """Outcomes of the effects a run may take between two model calls."""
    match outcome:
        case FinishChecked(verdict=hook):
            guards, verdict = on_finish_checked(state, hook)
            return apply_verdict(replace(state, guards=guards), verdict)
        case ContextCompacted(result=result):
            return context.on_compacted(state, result)
        case CompactionFailed(error=error):
            return context.on_compaction_failed(state, error)
        case _:
            assert_never(outcome)


def _replied(state: RunState, reply: ModelReply) -> RunState:
    """A reply's bookkeeping: a step, its usage, the new head, the calibration of estimates."""
    window = state.context
    calibration = window.calibration
    if reply.estimated_input_tokens > 0 and reply.usage.input_tokens > 0:
        calibration = min(max(reply.usage.input_tokens / reply.estimated_input_tokens, 0.5), 3.0)
    tokens = reply.usage.input_tokens + reply.usage.output_tokens
    return replace(
        state,
        step=state.step + 1,
        segment=replace(state.segment, steps=state.segment.steps + 1),
        conversation=Conversation(head=reply.conversation),
        usage=state.usage + reply.usage + Usage(model_calls=1),
        context=replace(window, tokens=tokens, calibration=calibration),
    )


def _on_reply(state: RunState, reply: ModelReply) -> RunState:
    base = _replied(state, reply)
    guards, verdict = guard_reply(base, reply.message, reply.stop_reason)
    base = replace(base, guards=guards)
    if verdict is not None:
        return apply_verdict(base, verdict)
    calls = reply.message.tool_calls
    if not calls:
        return _on_text_only(base, reply.message)
    if len(calls) == 1 and calls[0].name == FINISH_TOOL:
        finished = _on_finish(base, calls[0])
        if finished is not None:
            return finished
    turn, records = gate_turn(base, calls)
    turn = delegation.check_turn(base, turn)
    calm = replace(base, guards=replace(base.guards, nudges=0))
    return act(_with_records(calm, records), turn)


def _on_finish(state: RunState, call: ToolCall) -> RunState | None:
    """`finish` alone: refused once by a finish guard, checked by the worker (its hook, or the
    run's output schema), or the run completes. None when its arguments are bad (the gate
    makes that an observation); a typed run's answer is read by the worker's check."""
    answer, problem = finish_answer(call)
    typed = state.spec.output_schema is not None
    if problem is not None and not typed:
        return None
    calm = replace(state, guards=replace(state.guards, nudges=0))
    refusal = finish_refusal(state)
    if refusal is not None:
        error = nudges.finish_refused(refusal)
        refused = ToolFailed(call_id=call.id, failure="not_run", error=error)
        guarded = replace(calm, guards=replace(calm.guards, finish_refused=True))
        return act(guarded, Turn(calls=(call,), decided=(refused,)))
    if typed or finish_hooked(state):
        return replace(calm, guards=replace(calm.guards, finish_pending=call))
    return end(calm, Ending(reason=TerminalReason.COMPLETED, output=answer))


def _on_text_only(state: RunState, message: Message) -> RunState:
    if state.spec.finish_mode is FinishMode.TEXT:
        return end(state, Ending(reason=TerminalReason.COMPLETED, output=message.content))
    count = state.guards.nudges
    if count >= state.spec.max_nudges:
        problem = f"finish_not_called: {count + 1} replies in a row without a tool call"
        return end(state, Ending(reason=TerminalReason.CIRCUIT_BREAKER, error=problem))
    nudge = Message(
        role="user", content=nudges.text_only_in_tool_mode(), origin="nudge", step=state.step
    )
    return _queue(replace(state, guards=replace(state.guards, nudges=count + 1)), (nudge,))


def _with_records(state: RunState, records: tuple[ApprovalRecord, ...]) -> RunState:
    if not records:
        return state
    kept = (*state.steering.records, *records)[-MAX_RECORDS:]
    return replace(state, steering=replace(state.steering, records=kept))


def _on_tools_finished(
    state: RunState, results: tuple[ToolOutcome, ...], children: tuple[ChildEnded, ...]
) -> RunState:
    """Every call of the turn gets its observation; a child's end is one too, and what the
    child spent is charged to this run's budgets."""
    by_id: dict[str, ToolOutcome] = {r.call_id: r for r in state.turn.decided}
    by_id.update({r.call_id: r for r in results})
    by_id.update({c.call_id: delegation.observation(c) for c in children})
    calls = state.turn.calls
    messages = tuple(_observation(state, call, by_id.get(call.id)) for call in calls)
    observed = _queue(observe(state), messages)
    spent = Usage(tool_calls=len(results)) + delegation.charge(children)
    started = tuple(c.child for c in children)
    observed = replace(
        observed,
        usage=observed.usage + spent,
        children=delegation.remember(observed, started) if started else observed.children,
    )
    guards, verdict = guard_results(observed, calls, by_id)
    observed = replace(observed, guards=guards)
    return observed if verdict is None else apply_verdict(observed, verdict)


def _observation(state: RunState, call: ToolCall, outcome: ToolOutcome | None) -> Message:
    """The tool message for one call of the turn (a call with no result says so)."""
    assert state.catalog is not None
    if outcome is None:
        outcome = ToolFailed(
            call_id=call.id, failure="not_run", error="no result was reported for this call"
        )
    info = state.catalog.tools.get(call.name, ToolInfo())
    edited = state.turn.edited.get(call.id)
    return Message(
        role="tool",
        content=observation_text(outcome),
        tool_call_id=call.id,
        name=call.name,
        origin="tool",
        step=state.step,
        untrusted=info.untrusted_output and isinstance(outcome, ToolSucceeded),
        note=f"A reviewer edited the arguments; the call ran with: {edited}"
        if edited is not None
        else None,
    )

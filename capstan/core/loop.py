"""The ReAct loop as a pure state machine: state + outcome of the last effect -> next effect.

This module owns every transition of a run. It never does IO, never reads a clock, the
environment or a random source, and never imports Temporal: the workflow (`workflows.agent`) and
the in-process runner (`capstan.local`) are thin interpreters of it.

One iteration, in order:

1. Boundary (the interpreter folds `Boundary(now)` before every decision): a requested
   cancellation ends the run; a paused run waits for `resume`; expired approvals are settled;
   live messages are drained into the next model request; the step limit ends the run with
   `max_steps` or waits for `grant_steps`; a long segment asks for continue-as-new.
2. Think: `CallModel` with the conversation head and the messages since then.
3. Check the turn: a text-only reply completes the run (`text` mode) or gets a bounded nudge
   (`tool` mode); `finish` alone with a valid answer completes the run.
4. Gate (`capstan.core.gate`): unknown tools, policy denials and a `finish` mixed with other calls
   become observations at once; calls that need a human open approval requests or questions,
   and the run waits (`AwaitInput`) until each is decided, answered or expired.
5. Act: `RunTools` for the approved calls, with edited arguments where a reviewer edited them.
6. Observe: every call of the turn gets exactly one tool message, in the turn's order;
   untrusted output is marked for fencing.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

from capstan.core import budgets, context, nudges
from capstan.core.activity_io import (
    CallModelInput,
    CheckFinishInput,
    DescribeModelInput,
    ListToolsInput,
    ModelReply,
    RunToolInput,
)
from capstan.core.content import Text
from capstan.core.effects import (
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
    InputRefused,
    LoadTools,
    ModelDescribed,
    ModelFailed,
    ModelReplied,
    Outcome,
    RunTools,
    Steered,
    ToolsFinished,
    ToolsLoaded,
    ToolsUnavailable,
)
from capstan.core.finish import finish_answer
from capstan.core.gate import expire_requests, gate_turn, open_requests
from capstan.core.inputs import apply_input, note_refused
from capstan.core.messages import Message, Usage
from capstan.core.policy import rule_of_two_applies
from capstan.core.spec import FinishMode, RunResult, RunSpec, RunStatus, TerminalReason
from capstan.core.state import RunState
from capstan.core.tooling import FINISH_TOOL, ToolFailed, ToolInfo, ToolOutcome, ToolSucceeded
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


class IllegalTransitionError(RuntimeError):
    """An outcome arrived that the current phase cannot accept: a bug in an interpreter."""


def initial_state(
    spec: RunSpec,
    run_id: str,
    *,
    gating: bool = True,
    context_managed: bool = True,
    guarded: bool = True,
) -> RunState:
    """The state of a new run: the system prompt and the task are pending for the first call.

    `gating=False` reproduces runs recorded before tool policy existed (every known tool runs).
    """
    system = spec.system_prompt or DEFAULT_SYSTEM_PROMPT
    if spec.finish_mode is FinishMode.TEXT and spec.system_prompt is None:
        system = "You are a careful agent. Use tools when needed; reply in plain text when done."
    pending = (
        Message(role="system", content=system, origin="system"),
        Message(role="user", content=spec.task, origin="task"),
    )
    return RunState(
        spec=spec,
        run_id=run_id,
        pending=pending,
        gating=gating,
        context_managed=context_managed,
        guarded=guarded,
    )


def next_effect(state: RunState, *, continue_suggested: bool = False) -> Effect:
    """Decide what the run does next. The interpreter performs it and reports the outcome.

    `continue_suggested` is the interpreter's hint that its history is getting long.
    """
    gate = _boundary_gate(state)
    if gate is not None:
        return gate
    match state.phase:
        case "starting":
            if state.catalog is None:
                return LoadTools(request=ListToolsInput(allowed=state.spec.allowed_tools))
            return DescribeModel(request=DescribeModelInput(profile=state.spec.model))
        case "thinking":
            return _thinking(state, continue_suggested)
        case "acting":
            if state.approvals or state.questions:
                times = [r.expires_at for r in open_requests(state)]
                if (wall := budgets.deadline(state)) is not None:
                    times.append(wall)
                return AwaitInput(waiting_for=tuple(state.waiting_for()), until=min(times))
            return _run_tools(state)
        case "finished":
            return Finish(result=_result(state))
        case _:
            assert_never(state.phase)


def apply(state: RunState, outcome: Outcome) -> RunState:
    """Fold the outcome of the last effect (or a steering input) into the state."""
    match outcome:
        case CancelRequested() | Steered() | InputRefused():
            return _on_human(state, outcome)
        case Boundary(now=now):
            return _at_boundary(state, now)
        case ToolsLoaded(catalog=catalog):
            _expect(state, "starting", outcome.kind)
            rule_of_two = state.gating and rule_of_two_applies(catalog, state.spec)
            phase = "starting" if state.context_managed else "thinking"
            return state.model_copy(
                update={"catalog": catalog, "phase": phase, "rule_of_two": rule_of_two}
            )
        case ToolsUnavailable(error=error):
            _expect(state, "starting", outcome.kind)
            return context.terminate(
                state, TerminalReason.FAILED, f"could not list the run's tools: {error}"
            )
        case ModelDescribed(chain=chain):
            _expect(state, "starting", outcome.kind)
            return state.model_copy(update={"model_chain": chain, "phase": "thinking"})
        case FinishChecked() | ContextCompacted() | CompactionFailed():
            _expect(state, "thinking", outcome.kind)
            return _between_calls(state, outcome)
        case ModelReplied(reply=reply):
            _expect(state, "thinking", outcome.kind)
            return _on_reply(state, reply)
        case ModelFailed(error=error, error_type=error_type):
            _expect(state, ("starting", "thinking"), outcome.kind)
            return context.on_model_failed(state, error or "the model call failed", error_type)
        case ToolsFinished(results=results):
            _expect(state, "acting", outcome.kind)
            return _on_tools_finished(state, results)
        case _:
            assert_never(outcome)


def _on_human(state: RunState, outcome: CancelRequested | Steered | InputRefused) -> RunState:
    """Outcomes that come from people, not from an effect: they may arrive at any time."""
    match outcome:
        case CancelRequested(reason=reason):
            if state.terminal is not None or state.cancel_reason is not None:
                return state
            return state.model_copy(update={"cancel_reason": reason or "cancelled"})
        case Steered(input=item):
            return apply_input(state, item)
        case InputRefused(problem=problem):
            return note_refused(state, problem)


def _between_calls(
    state: RunState, outcome: FinishChecked | ContextCompacted | CompactionFailed
) -> RunState:
    """Outcomes of the effects a run may take between two model calls."""
    match outcome:
        case FinishChecked(verdict=verdict):
            return on_finish_checked(state, verdict)
        case ContextCompacted(result=result):
            return context.on_compacted(state, result)
        case CompactionFailed(error=error):
            return context.on_compaction_failed(state, error)
        case _:
            assert_never(outcome)


def status(state: RunState) -> RunStatus:
    """The `status` query: the state's view, with what the run waits for taken from the
    decision the loop would make now (so a spent budget awaiting a grant shows too)."""
    view = state.status()
    effect = next_effect(state)
    if isinstance(effect, AwaitInput):
        view = view.model_copy(update={"waiting_for": list(effect.waiting_for)})
    return view


def carry_over(state: RunState) -> RunState:
    """The state a continued-as-new run starts from."""
    return state.model_copy(update={"segment_steps": 0, "continued": state.continued + 1})


def observation_text(outcome: ToolOutcome) -> Text:
    """What the model sees for one tool outcome."""
    if isinstance(outcome, ToolFailed):
        return f"Error ({outcome.failure}): {outcome.error}"
    return outcome.output


# Transitions -----------------------------------------------------------------------------------


def _expect(state: RunState, phase: str | tuple[str, ...], kind: str) -> None:
    if state.phase not in ((phase,) if isinstance(phase, str) else phase):
        raise IllegalTransitionError(f"outcome {kind!r} arrived in phase {state.phase!r}")


def _boundary_gate(state: RunState) -> Effect | None:
    """What stops the run at any boundary: its end, a cancellation, spent wall time, a pause."""
    if state.terminal is not None:
        return Finish(result=_result(state))
    if state.cancel_reason is not None:
        return Finish(
            result=_result(_terminate(state, TerminalReason.CANCELLED, state.cancel_reason))
        )
    spent = budgets.exhausted(state, before_model_call=False) if state.guarded else None
    if spent is not None and (spent[0] == "wall_seconds" or state.phase == "thinking"):
        return _budget_spent(state, spent)
    if state.paused:
        return AwaitInput(waiting_for=("resume",), until=budgets.deadline(state))
    return None


def _thinking(state: RunState, continue_suggested: bool) -> Effect:
    """A finish awaiting its check, step limit, continue-as-new, compaction, the model call."""
    if state.finish_pending is not None:
        answer, _ = finish_answer(state.finish_pending)
        return CheckFinish(
            request=CheckFinishInput(run_id=state.run_id, step=state.step, answer=answer)
        )
    if state.awaiting_steps:
        return AwaitInput(waiting_for=("steps",))
    if state.step >= state.step_limit:
        done = _terminate(state, TerminalReason.MAX_STEPS, f"stopped after {state.step} steps")
        return Finish(result=_result(done))
    if state.segment_steps >= state.spec.continue_as_new_every or (
        continue_suggested and state.segment_steps > 0
    ):
        return ContinueAsNew()
    decision = context.plan(state)
    if decision == "reject":
        needed = context.estimate_request(state)
        usable = state.model.usable_window if state.model else 0
        problem = f"the next request needs ~{needed} tokens; the model allows {usable}"
        return Finish(result=_result(_terminate(state, TerminalReason.PROMPT_TOO_LONG, problem)))
    if decision is not None:
        return CompactContext(request=context.compact_request(state, decision))
    if state.guarded and (spent := budgets.exhausted(state, before_model_call=True)):
        return _budget_spent(state, spent)
    return CallModel(request=_model_request(state))


def _budget_spent(state: RunState, spent: tuple[str, str]) -> Effect:
    """End the run naming the budget, or wait for a grant when the run asks for that."""
    name, detail = spent
    if state.spec.budgets.wait_for_grant and name != "wall_seconds":
        return AwaitInput(waiting_for=(f"budget:{name}",), until=budgets.deadline(state))
    return Finish(result=_result(_terminate(state, TerminalReason.BUDGET_EXHAUSTED, detail)))


def _model_request(state: RunState) -> CallModelInput:
    assert state.catalog is not None
    policy = state.spec.context
    return CallModelInput(
        run_id=state.run_id,
        step=state.step + 1,
        profile=state.profile,
        conversation=state.conversation,
        new_messages=state.pending,
        tools=state.catalog.specs_ref,
        observation_max_chars=state.spec.observation_max_chars,
        tool_result_max_tokens=policy.tool_result_max_tokens,
        tool_result_window_share=policy.tool_result_window_share,
        tool_result_max_lines=policy.tool_result_max_lines,
        tool_result_max_bytes=policy.tool_result_max_bytes,
    )


def _run_tools(state: RunState) -> RunTools:
    assert state.catalog is not None
    decided = {d.call_id for d in state.decided}
    to_run = tuple(c for c in state.turn_calls if c.id not in decided)
    default_timeout = state.spec.tuning.tool_default_timeout
    return RunTools(
        calls=tuple(
            RunToolInput(
                run_id=state.run_id,
                step=state.step,
                call_id=c.id,
                name=c.name,
                arguments=state.approved_args.get(c.id, c.arguments),
                idempotency_key=f"{state.run_id}/{state.step}/{c.id}",
            )
            for c in to_run
        ),
        concurrency=state.spec.tool_concurrency,
        timeouts=tuple(state.catalog.timeout_for(c.name, default_timeout) for c in to_run),
    )


def _on_reply(state: RunState, reply: ModelReply) -> RunState:
    calibration = state.calibration
    if reply.estimated_input_tokens > 0 and reply.usage.input_tokens > 0:
        calibration = min(max(reply.usage.input_tokens / reply.estimated_input_tokens, 0.5), 3.0)
    base = state.model_copy(
        update={
            "step": state.step + 1,
            "segment_steps": state.segment_steps + 1,
            "conversation": reply.conversation,
            "pending": (),
            "usage": state.usage + reply.usage + Usage(model_calls=1),
            "context_tokens": reply.usage.input_tokens + reply.usage.output_tokens,
            "calibration": calibration,
        }
    )
    if base.guarded:
        base, handled = guard_reply(base, reply.message, reply.stop_reason)
        if handled:
            return base
    calls = reply.message.tool_calls
    if not calls:
        return _on_text_only(base, reply.message)
    if len(calls) == 1 and calls[0].name == FINISH_TOOL:
        answer, problem = finish_answer(calls[0])
        refusal = finish_refusal(base) if problem is None else None
        if refusal is not None:
            refused = ToolFailed(
                call_id=calls[0].id, failure="not_run", error=nudges.finish_refused(refusal)
            )
            update = {"phase": "acting", "turn_calls": calls, "decided": (refused,)}
            return base.model_copy(update={**update, "finish_refused": True, "nudges": 0})
        if problem is None and finish_hooked(base):
            return base.model_copy(update={"finish_pending": calls[0], "nudges": 0})
        if problem is None:
            done = base.model_copy(update={"output": answer, "nudges": 0})
            return _terminate(done, TerminalReason.COMPLETED, None)
    return gate_turn(base.model_copy(update={"nudges": 0}), calls)


def _on_text_only(state: RunState, message: Message) -> RunState:
    if state.spec.finish_mode is FinishMode.TEXT:
        return _terminate(
            state.model_copy(update={"output": message.content}), TerminalReason.COMPLETED, None
        )
    if state.nudges >= state.spec.max_nudges:
        problem = f"finish_not_called: {state.nudges + 1} replies in a row without a tool call"
        return _terminate(state, TerminalReason.CIRCUIT_BREAKER, problem)
    nudge = Message(
        role="user", content=nudges.text_only_in_tool_mode(), origin="nudge", step=state.step
    )
    return state.model_copy(update={"pending": (nudge,), "nudges": state.nudges + 1})


def _at_boundary(state: RunState, now: datetime) -> RunState:
    """Settle what time decides (expiries) and drain live messages before the next model call."""
    state = expire_requests(state.model_copy(update={"now": now}), now)
    if state.started_at is None:
        state = state.model_copy(update={"started_at": now})
    if state.phase == "thinking" and not state.paused and state.inbox:
        stamped = tuple(m.model_copy(update={"step": state.step}) for m in state.inbox)
        state = state.model_copy(update={"pending": state.pending + stamped, "inbox": ()})
    return finalize_warning(state)


def _on_tools_finished(state: RunState, results: tuple[ToolOutcome, ...]) -> RunState:
    assert state.catalog is not None
    by_id: dict[str, ToolOutcome] = {r.call_id: r for r in state.decided}
    by_id.update({r.call_id: r for r in results})
    messages = []
    for call in state.turn_calls:
        outcome = by_id.get(call.id) or ToolFailed(
            call_id=call.id, failure="not_run", error="no result was reported for this call"
        )
        info = state.catalog.tools.get(call.name, ToolInfo())
        edited = state.edited.get(call.id)
        messages.append(
            Message(
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
        )
    observed = state.model_copy(
        update={
            "phase": "thinking",
            "pending": state.pending + tuple(messages),
            "turn_calls": (),
            "decided": (),
            "approved_args": {},
            "edited": {},
            "usage": state.usage + Usage(tool_calls=len(results)),
        }
    )
    return guard_results(observed, state.turn_calls, by_id)


_terminate = context.terminate


def _result(state: RunState) -> RunResult:
    assert state.terminal is not None
    return RunResult(
        run_id=state.run_id,
        terminal_reason=state.terminal,
        output=state.output,
        error=state.error,
        steps=state.step,
        usage=state.usage,
    )

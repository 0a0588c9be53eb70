"""Guarded turns: turn quality, finish guards and circuit breakers, as verdicts on the run state.

Pure. Each function reads the state and returns the updated `Guards` with a verdict (an `Ending`,
an `Act` or a `Nudge`, see `capstan.core.transitions`) for the loop to apply; none of them
changes the run's phase. Nudges that follow tool calls are queued after the tool results, never
between an assistant's tool calls and their results, which providers reject.
"""

from __future__ import annotations

from dataclasses import replace

from capstan.core import budgets, nudges
from capstan.core.activity_io import FinishVerdict
from capstan.core.finish import finish_answer
from capstan.core.guards import after_tools, after_turn, turn_problem
from capstan.core.messages import Message, ToolCall
from capstan.core.spec import TerminalReason
from capstan.core.state import Ending, Guards, RunState, Turn
from capstan.core.tooling import ToolFailed, ToolOutcome
from capstan.core.transitions import Act, Nudge, Verdict

__all__ = [
    "finalize_warning",
    "finish_hooked",
    "finish_refusal",
    "guard_reply",
    "guard_results",
    "on_finish_checked",
]


def _nudge(state: RunState, text: str) -> Message:
    return Message(role="user", content=text, origin="nudge", step=state.step)


def _abort(breaker: str, detail: str) -> Ending:
    return Ending(reason=TerminalReason.CIRCUIT_BREAKER, error=f"{breaker}: {detail}")


def guard_reply(
    state: RunState, message: Message, stop_reason: str
) -> tuple[Guards, Verdict | None]:
    """A problem turn, a truncated or a repeated call gets a verdict here; any other reply
    (verdict None) goes on to the ordinary finish / gate path with the updated streaks."""
    calls = message.tool_calls
    policy = state.spec.guards
    guards = state.guards
    if not calls:
        assert state.catalog is not None
        problem = turn_problem(message, state.catalog.names)
        if problem is None:
            return guards, None
        if guards.nudges >= state.spec.max_nudges:
            return guards, _abort(problem, f"{guards.nudges + 1} such replies in a row")
        nudge = _nudge(state, nudges.turn_problem(problem))
        return replace(guards, nudges=guards.nudges + 1), Nudge(messages=(nudge,))
    truncated = stop_reason == "length"
    streaks, identical, truncated_run = after_turn(guards.streaks, calls, truncated)
    guards = replace(guards, streaks=streaks)
    if truncated_run >= policy.truncated_abort:
        return guards, _abort("truncated_tool_calls", f"{truncated_run} cut-off replies in a row")
    if identical >= policy.identical_call_abort:
        return guards, _abort("identical_call", f"the same call {identical} times in a row")
    if truncated:
        refused = tuple(
            ToolFailed(call_id=c.id, failure="not_run", error=nudges.truncated_calls())
            for c in calls
        )
        return replace(guards, nudges=0), Act(turn=Turn(calls=calls, decided=refused))
    return guards, None


def finish_refusal(state: RunState) -> str | None:
    """Why the first `finish` of the run is refused, if a finish guard says so."""
    if state.guards.finish_refused:
        return None
    policy = state.spec.guards
    if policy.finish_refusal:
        return policy.finish_refusal
    missing = [t for t in policy.finish_requires if t not in state.guards.streaks.succeeded]
    if missing:
        return f"these tools have not been used successfully yet: {', '.join(missing)}"
    return None


def guard_results(
    state: RunState, calls: tuple[ToolCall, ...], outcomes: dict[str, ToolOutcome]
) -> tuple[Guards, Ending | Nudge | None]:
    """Fold a turn's results into the breakers: an abort, or nudges to queue after the results."""
    policy = state.spec.guards
    streaks, counts = after_tools(
        state.guards.streaks, calls, outcomes, policy.fruitless_chars, policy.similar_window
    )
    counts["identical_call"] = streaks.identical
    guards = replace(state.guards, streaks=streaks)
    aborts = {
        "argument_errors": policy.argument_errors_abort,
        "fruitless_calls": policy.fruitless_abort,
        "similar_results": policy.similar_abort,
    }
    for breaker, threshold in aborts.items():
        if counts[breaker] >= threshold:
            return guards, _abort(breaker, f"{counts[breaker]} in a row")
    thresholds = {
        "identical_call": policy.identical_call_nudge,
        "fruitless_calls": policy.fruitless_nudge,
        "similar_results": policy.similar_nudge,
    }
    due = [b for b, n in thresholds.items() if counts[b] >= n and b not in streaks.nudged]
    if not due:
        return guards, None
    messages = tuple(_nudge(state, nudges.breaker(b, counts[b])) for b in due)
    nudged = replace(streaks, nudged=(*streaks.nudged, *due))
    return replace(guards, streaks=nudged), Nudge(messages=messages)


def finalize_warning(state: RunState) -> Message | None:
    """Once, when few steps or little of a budget remain, ask the model to wrap up."""
    if state.phase != "thinking" or state.guards.finalize_warned:
        return None
    policy = state.spec.guards
    near_steps = state.step > 0 and state.step_limit - state.step <= policy.finalize_steps
    near_budget = budgets.remaining_fraction(state) <= policy.finalize_fraction
    if not (near_steps or near_budget):
        return None
    return _nudge(state, nudges.finalize())


def _invalid_output(
    state: RunState, guards: Guards, call: ToolCall, verdict: FinishVerdict
) -> tuple[Guards, Ending | Act]:
    """An answer the output schema refused: the model sees each failing path and tries again,
    until `output_attempts` answers were refused; then the run ends `output_invalid` with the
    last answer and its errors."""
    count = guards.invalid_outputs + 1
    guards = replace(guards, invalid_outputs=count)
    if count >= state.spec.guards.output_attempts:
        error = f"{count} answers did not match the output schema; the last: " + "; ".join(
            verdict.invalid
        )
        return guards, Ending(TerminalReason.OUTPUT_INVALID, error=error, output=verdict.output)
    error = nudges.output_invalid(verdict.invalid, state.spec.guards.output_attempts - count)
    # `not_run`, not `invalid_arguments`: the argument-errors breaker would end the run before
    # `output_attempts` when that is set above its threshold; this bound is the one that applies
    refused = ToolFailed(call_id=call.id, failure="not_run", error=error)
    return guards, Act(turn=Turn(calls=(call,), decided=(refused,)))


def finish_hooked(state: RunState) -> bool:
    """A first `finish` goes to the worker's finish guard hook when it has one."""
    return (
        state.catalog is not None and state.catalog.finish_hook and not state.guards.finish_refused
    )


def on_finish_checked(state: RunState, verdict: FinishVerdict) -> tuple[Guards, Ending | Act]:
    """The hook's verdict on the pending `finish`: the run completes, or the finish is refused
    (once) and the model sees why."""
    call = state.guards.finish_pending
    assert call is not None
    guards = replace(state.guards, finish_pending=None)
    if verdict.invalid:
        return _invalid_output(state, guards, call, verdict)
    if verdict.refusal is None:
        if verdict.output is not None:  # a typed run's answer, as JSON the schema accepted
            ending = Ending(TerminalReason.COMPLETED, output=verdict.output, output_format="json")
            return guards, ending
        answer, _ = finish_answer(call)
        return guards, Ending(reason=TerminalReason.COMPLETED, output=answer)
    refused = ToolFailed(
        call_id=call.id, failure="not_run", error=nudges.finish_refused(verdict.refusal)
    )
    return replace(guards, finish_refused=True), Act(turn=Turn(calls=(call,), decided=(refused,)))

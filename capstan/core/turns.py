"""Guarded turns: turn quality, finish guards and circuit breakers applied to the run state.

Pure. Only for runs with `state.guarded` (new runs; older histories replay without it). Nudges
that follow tool calls are queued after the tool results, never between an assistant's tool
calls and their results, which providers reject.
"""

from __future__ import annotations

from capstan.core import budgets, nudges
from capstan.core.activity_io import FinishVerdict
from capstan.core.context import terminate
from capstan.core.finish import finish_answer
from capstan.core.guards import after_tools, after_turn, turn_problem
from capstan.core.messages import Message, ToolCall
from capstan.core.spec import TerminalReason
from capstan.core.state import RunState
from capstan.core.tooling import ToolFailed, ToolOutcome

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


def _abort(state: RunState, breaker: str, detail: str) -> RunState:
    return terminate(state, TerminalReason.CIRCUIT_BREAKER, f"{breaker}: {detail}")


def guard_reply(state: RunState, message: Message, stop_reason: str) -> tuple[RunState, bool]:
    """(state, handled): a problem turn, a truncated or repeated call is handled here; any other
    reply goes on to the ordinary finish / gate path with the updated streaks."""
    calls = message.tool_calls
    policy = state.spec.guards
    if not calls:
        assert state.catalog is not None
        problem = turn_problem(message, state.catalog.names)
        if problem is None:
            return state, False
        if state.nudges >= state.spec.max_nudges:
            return _abort(state, problem, f"{state.nudges + 1} such replies in a row"), True
        nudge = _nudge(state, nudges.turn_problem(problem))
        return state.model_copy(update={"pending": (nudge,), "nudges": state.nudges + 1}), True
    truncated = stop_reason == "length"
    guard, identical, truncated_run = after_turn(state.guard, calls, truncated)
    state = state.model_copy(update={"guard": guard})
    if truncated_run >= policy.truncated_abort:
        detail = f"{truncated_run} cut-off replies in a row"
        return _abort(state, "truncated_tool_calls", detail), True
    if identical >= policy.identical_call_abort:
        return _abort(state, "identical_call", f"the same call {identical} times in a row"), True
    if truncated:
        refused = tuple(
            ToolFailed(call_id=c.id, failure="not_run", error=nudges.truncated_calls())
            for c in calls
        )
        update = {"phase": "acting", "turn_calls": calls, "decided": refused, "nudges": 0}
        return state.model_copy(update=update), True
    return state, False


def finish_refusal(state: RunState) -> str | None:
    """Why the first `finish` of the run is refused, if a finish guard says so."""
    if not state.guarded or state.finish_refused:
        return None
    policy = state.spec.guards
    if policy.finish_refusal:
        return policy.finish_refusal
    missing = [t for t in policy.finish_requires if t not in state.guard.succeeded]
    if missing:
        return f"these tools have not been used successfully yet: {', '.join(missing)}"
    return None


def guard_results(
    state: RunState, calls: tuple[ToolCall, ...], outcomes: dict[str, ToolOutcome]
) -> RunState:
    """Fold a turn's results into the breakers: abort, or queue nudges after the results."""
    if not state.guarded:
        return state
    policy = state.spec.guards
    guard, streaks = after_tools(
        state.guard, calls, outcomes, policy.fruitless_chars, policy.similar_window
    )
    streaks["identical_call"] = guard.identical
    state = state.model_copy(update={"guard": guard})
    aborts = {
        "argument_errors": policy.argument_errors_abort,
        "fruitless_calls": policy.fruitless_abort,
        "similar_results": policy.similar_abort,
    }
    for breaker, threshold in aborts.items():
        if streaks[breaker] >= threshold:
            return _abort(state, breaker, f"{streaks[breaker]} in a row")
    thresholds = {
        "identical_call": policy.identical_call_nudge,
        "fruitless_calls": policy.fruitless_nudge,
        "similar_results": policy.similar_nudge,
    }
    due = [b for b, n in thresholds.items() if streaks[b] >= n and b not in state.guard.nudged]
    if not due:
        return state
    messages = tuple(_nudge(state, nudges.breaker(b, streaks[b])) for b in due)
    return state.model_copy(
        update={
            "pending": state.pending + messages,
            "guard": state.guard.model_copy(update={"nudged": (*state.guard.nudged, *due)}),
        }
    )


def finalize_warning(state: RunState) -> RunState:
    """Once, when few steps or little of a budget remain, ask the model to wrap up."""
    if state.phase != "thinking" or not state.guarded or state.finalize_warned:
        return state
    policy = state.spec.guards
    near_steps = state.step > 0 and state.step_limit - state.step <= policy.finalize_steps
    near_budget = budgets.remaining_fraction(state) <= policy.finalize_fraction
    if not (near_steps or near_budget):
        return state
    note = _nudge(state, nudges.finalize())
    return state.model_copy(update={"pending": (*state.pending, note), "finalize_warned": True})


def finish_hooked(state: RunState) -> bool:
    """A first `finish` goes to the worker's finish guard hook when it has one."""
    return (
        state.guarded
        and state.catalog is not None
        and state.catalog.finish_hook
        and not state.finish_refused
    )


def on_finish_checked(state: RunState, verdict: FinishVerdict) -> RunState:
    call = state.finish_pending
    assert call is not None
    cleared = state.model_copy(update={"finish_pending": None})
    if verdict.refusal is None:
        answer, _ = finish_answer(call)
        return terminate(
            cleared.model_copy(update={"output": answer}), TerminalReason.COMPLETED, None
        )
    refused = ToolFailed(
        call_id=call.id, failure="not_run", error=nudges.finish_refused(verdict.refusal)
    )
    update = {"phase": "acting", "turn_calls": (call,), "decided": (refused,)}
    return cleared.model_copy(update={**update, "finish_refused": True})

"""Folding human input into the run state: decisions, pause/resume, messages, answers, grants.

Pure. `check` says why an input would be rejected (the update validators call it, so a rejected
update writes nothing to history); `apply_input` folds an accepted input, and records a rejected
signal as a diagnostic instead. Every input is applied at most once per id, for the life of the
run. An input never moves the run's phase: a cancellation is a request the next boundary
settles, and a grant of zero steps comes back as an `Ending` verdict for the loop to record.

Nothing here holds unbounded text: an input over the bounds of `capstan.core.limits` is refused
before anything else looks at it, and its diagnostic quotes it only as a short preview.
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from capstan.core import limits, policy
from capstan.core.content import Text, preview_of
from capstan.core.limits import APPLIED_IDS, INBOX_MESSAGES
from capstan.core.messages import Message
from capstan.core.spec import TerminalReason
from capstan.core.state import (
    MAX_DIAGNOSTICS,
    MAX_RECORDS,
    Ending,
    RunState,
    Steering,
)
from capstan.core.steering import (
    Answer,
    ApprovalRecord,
    ApprovalRequest,
    BudgetGrant,
    CancelRequest,
    Decision,
    LiveMessage,
    PauseRequest,
    ResumeRequest,
    SteeringInput,
    StepGrant,
    size_problem,
)
from capstan.core.tool_names import ASK_USER_TOOL
from capstan.core.tooling import ToolFailed, ToolInfo, ToolSucceeded

__all__ = ["apply_input", "check", "is_duplicate", "note_refused"]

#: A diagnostic is cut to this many characters.
MAX_NOTE_CHARS = 500


def is_duplicate(state: RunState, item: SteeringInput) -> bool:
    return bool(item.id) and state.steering.applied(item.id)


def check(state: RunState, item: SteeringInput) -> str | None:
    """Why `item` cannot be applied now, or None."""
    problem = size_problem(item)
    if problem is not None:
        return problem
    if state.terminal is not None:
        return f"the run has already ended ({state.terminal.value})"
    remembered = len(state.steering.seen)
    if item.id and remembered >= APPLIED_IDS and not isinstance(item, CancelRequest):
        return f"the run has applied {remembered:,} inputs, all it can remember; only cancel now"
    if (
        isinstance(item, LiveMessage)
        and not state.steering.spills
        and len(state.steering.inbox) >= INBOX_MESSAGES
    ):
        # only executions recorded before `Patch.INBOX_QUEUE` (`capstan.core.overflow`)
        return f"the inbox is full: {INBOX_MESSAGES} messages wait for the model; send it later"
    if isinstance(item, Decision):
        return _check_decision(state, item)
    if isinstance(item, Answer) and not any(
        q.request_id == item.request_id for q in state.turn.questions
    ):
        return f"no open question {item.request_id!r} (unknown, stale or already answered)"
    return None


def _check_decision(state: RunState, d: Decision) -> str | None:
    request = _open_request(state, d.request_id)
    if request is None:
        return f"no open approval request {d.request_id!r} (unknown, stale or already decided)"
    if d.args_hash != request.args_hash:
        return (
            f"arguments hash mismatch for {d.request_id!r}: the decision was made for other "
            "arguments than the ones waiting"
        )
    if d.action == "edit":
        if d.arguments is None:
            return "an edit needs new arguments (JSON)"
        assert state.catalog is not None
        info = state.catalog.tools.get(request.tool, ToolInfo())
        problem = policy.check_arguments(
            request.tool, info, state.spec, d.arguments, state.legacy_policy
        )
        if problem is not None:
            return f"edited arguments rejected: {problem}"
    return None


def apply_input(state: RunState, item: SteeringInput) -> tuple[RunState, Ending | None]:
    """Fold one input; the verdict is the run's end when the input ends it. Duplicates change
    nothing; rejected inputs leave a diagnostic."""
    if is_duplicate(state, item):
        return state, None
    problem = check(state, item)
    if problem is not None:
        name = preview_of(item.id, 80) if item.id else "(no id)"
        return note_refused(state, f"ignored {item.kind} {name}: {problem}"), None
    if isinstance(item, StepGrant) and item.steps == 0:
        ending = Ending(
            reason=TerminalReason.MAX_STEPS,
            error=f"stopped after {state.step} steps: no more steps granted",
        )
        return _applied(state, item), ending
    return _applied(_fold(state, item), item), None


def _applied(state: RunState, item: SteeringInput) -> RunState:
    # past the allowance only a cancel gets here: idempotent, it needs no memory
    if not item.id or len(state.steering.seen) >= APPLIED_IDS:
        return state
    return replace(state, steering=state.steering.remember(item.id))


def note_refused(state: RunState, note: str) -> RunState:
    """Record why an input was not applied, where `status` and the transcript show it."""
    if len(note) > MAX_NOTE_CHARS:
        note = note[: MAX_NOTE_CHARS - 1] + "…"
    return replace(state, diagnostics=(*state.diagnostics, note)[-MAX_DIAGNOSTICS:])


def _fold(state: RunState, item: SteeringInput) -> RunState:
    match item:
        case Decision():
            return _decide(state, item)
        case Answer():
            return _answer(state, item)
        case BudgetGrant(budget=budget, amount=amount):
            extra = dict(state.budget.extra)
            extra[budget] = extra.get(budget, 0.0) + amount
            return replace(state, budget=replace(state.budget, extra=extra))
        case StepGrant(steps=steps):
            granted = state.budget.extra_steps + steps
            return replace(state, budget=replace(state.budget, extra_steps=granted))
        case PauseRequest() | ResumeRequest() | CancelRequest() | LiveMessage():
            return replace(state, steering=_steer(state.steering, item))
        case _:
            assert_never(item)


def _steer(
    steering: Steering, item: PauseRequest | ResumeRequest | CancelRequest | LiveMessage
) -> Steering:
    match item:
        case PauseRequest():
            return replace(steering, paused=True)
        case ResumeRequest():
            return replace(steering, paused=False)
        case CancelRequest(reason=reason):
            if steering.cancel_reason is not None:
                return steering
            return replace(steering, cancel_reason=limits.describe(reason or "cancelled by a user"))
        case LiveMessage(text=text, id=mid):
            message = Message(role="user", content=text, origin="live", source_id=mid or None)
            return replace(steering, inbox=(*steering.inbox, message))
        case _:
            assert_never(item)


def _open_request(state: RunState, request_id: str) -> ApprovalRequest | None:
    return next((r for r in state.turn.approvals if r.request_id == request_id), None)


def _decide(state: RunState, d: Decision) -> RunState:
    request = _open_request(state, d.request_id)
    assert request is not None
    turn = state.turn
    approved = dict(turn.approved_args)
    edited = dict(turn.edited)
    decided = list(turn.decided)
    closing = [request]
    always = state.steering.always
    executed: Text | None = request.arguments
    if d.action == "deny":
        reason = limits.describe(d.reason or "no reason given")
        decided.append(
            ToolFailed(
                call_id=request.call_id, failure="denied", error=f"denied by a reviewer: {reason}"
            )
        )
        executed = None
    elif d.action == "edit":
        assert d.arguments is not None
        executed = d.arguments
        approved[request.call_id] = d.arguments
        edited[request.call_id] = limits.describe(d.arguments)
    else:
        approved[request.call_id] = request.arguments
        if d.action == "always":
            always = (*always, request.tool) if request.tool not in always else always
            closing += [r for r in turn.approvals if r.tool == request.tool and r is not request]
            for r in closing[1:]:
                approved[r.call_id] = r.arguments
    records = [
        ApprovalRecord(
            request_id=r.request_id,
            tool=r.tool,
            action=d.action,
            identity=d.identity,
            at=state.now,
            args_hash=r.args_hash,
            executed_arguments=executed if r is request else r.arguments,
            reason=d.reason,
        )
        for r in closing
    ]
    closed = {r.request_id for r in closing}
    turn = replace(
        turn,
        approvals=tuple(r for r in turn.approvals if r.request_id not in closed),
        approved_args=approved,
        edited=edited,
        decided=tuple(decided),
    )
    kept = (*state.steering.records, *records)[-MAX_RECORDS:]
    return replace(state, turn=turn, steering=replace(state.steering, always=always, records=kept))


def _answer(state: RunState, a: Answer) -> RunState:
    question = next(q for q in state.turn.questions if q.request_id == a.request_id)
    record = ApprovalRecord(
        request_id=a.request_id,
        tool=ASK_USER_TOOL,
        action="answered",
        identity=a.identity,
        at=state.now,
        executed_arguments=a.text,
    )
    turn = replace(
        state.turn,
        questions=tuple(q for q in state.turn.questions if q is not question),
        decided=(*state.turn.decided, ToolSucceeded(call_id=question.call_id, output=a.text)),
    )
    kept = (*state.steering.records, record)[-MAX_RECORDS:]
    return replace(state, turn=turn, steering=replace(state.steering, records=kept))

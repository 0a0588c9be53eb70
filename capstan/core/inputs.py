"""Folding human input into the run state: decisions, pause/resume, messages, answers, grants.

Pure. `check` says why an input would be rejected (the update validators call it, so a rejected
update writes nothing to history); `apply_input` folds an accepted input, and records a rejected
signal as a diagnostic instead. Every input is applied at most once per id.
"""

from __future__ import annotations

from typing import assert_never

from capstan.core import policy
from capstan.core.content import Text
from capstan.core.messages import Message
from capstan.core.spec import TerminalReason
from capstan.core.state import MAX_APPLIED_IDS, MAX_DIAGNOSTICS, MAX_RECORDS, RunState
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
)
from capstan.core.tooling import ToolFailed, ToolInfo, ToolSucceeded

__all__ = ["apply_input", "check", "is_duplicate", "note_refused"]


def is_duplicate(state: RunState, item: SteeringInput) -> bool:
    return bool(item.id) and item.id in state.applied_ids


def check(state: RunState, item: SteeringInput) -> str | None:
    """Why `item` cannot be applied now, or None."""
    if state.terminal is not None:
        return f"the run has already ended ({state.terminal.value})"
    if isinstance(item, Decision):
        return _check_decision(state, item)
    if isinstance(item, Answer) and not any(
        q.request_id == item.request_id for q in state.questions
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
        problem = policy.check_arguments(request.tool, info, state.spec, d.arguments)
        if problem is not None:
            return f"edited arguments rejected: {problem}"
    return None


def apply_input(state: RunState, item: SteeringInput) -> RunState:
    """Fold one input. Duplicates change nothing; rejected inputs leave a diagnostic."""
    if is_duplicate(state, item):
        return state
    problem = check(state, item)
    if problem is not None:
        return note_refused(state, f"ignored {item.kind} {item.id or '(no id)'}: {problem}")
    state = _fold(state, item)
    if item.id:
        state = state.model_copy(
            update={"applied_ids": (*state.applied_ids, item.id)[-MAX_APPLIED_IDS:]}
        )
    return state


def note_refused(state: RunState, note: str) -> RunState:
    """Record why an input was not applied, where `status` and the transcript show it."""
    return state.model_copy(update={"diagnostics": (*state.diagnostics, note)[-MAX_DIAGNOSTICS:]})


def _fold(state: RunState, item: SteeringInput) -> RunState:
    match item:
        case Decision():
            return _decide(state, item)
        case PauseRequest():
            return state.model_copy(update={"paused": True})
        case ResumeRequest():
            return state.model_copy(update={"paused": False})
        case CancelRequest(reason=reason):
            if state.cancel_reason is not None:
                return state
            return state.model_copy(update={"cancel_reason": reason or "cancelled by a user"})
        case LiveMessage(text=text, id=mid):
            message = Message(role="user", content=text, origin="live", source_id=mid or None)
            return state.model_copy(update={"inbox": (*state.inbox, message)})
        case Answer():
            return _answer(state, item)
        case BudgetGrant(budget=budget, amount=amount):
            extra = dict(state.budget_extra)
            extra[budget] = extra.get(budget, 0.0) + amount
            return state.model_copy(update={"budget_extra": extra})
        case StepGrant(steps=steps):
            if steps == 0:
                return state.model_copy(
                    update={
                        "terminal": TerminalReason.MAX_STEPS,
                        "error": f"stopped after {state.step} steps: no more steps granted",
                        "phase": "finished",
                    }
                )
            return state.model_copy(update={"extra_steps": state.extra_steps + steps})
        case _:
            assert_never(item)


def _open_request(state: RunState, request_id: str) -> ApprovalRequest | None:
    return next((r for r in state.approvals if r.request_id == request_id), None)


def _decide(state: RunState, d: Decision) -> RunState:
    request = _open_request(state, d.request_id)
    assert request is not None
    approved = dict(state.approved_args)
    edited = dict(state.edited)
    decided = list(state.decided)
    closing = [request]
    always = state.always
    executed: Text | None = request.arguments
    if d.action == "deny":
        reason = d.reason or "no reason given"
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
        edited[request.call_id] = d.arguments
    else:
        approved[request.call_id] = request.arguments
        if d.action == "always":
            always = (*always, request.tool) if request.tool not in always else always
            closing += [r for r in state.approvals if r.tool == request.tool and r is not request]
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
    return state.model_copy(
        update={
            "approvals": tuple(r for r in state.approvals if r.request_id not in closed),
            "approved_args": approved,
            "edited": edited,
            "decided": tuple(decided),
            "always": always,
            "records": (*state.records, *records)[-MAX_RECORDS:],
        }
    )


def _answer(state: RunState, a: Answer) -> RunState:
    question = next(q for q in state.questions if q.request_id == a.request_id)
    record = ApprovalRecord(
        request_id=a.request_id,
        tool="ask_user",
        action="answered",
        identity=a.identity,
        at=state.now,
        executed_arguments=a.text,
    )
    return state.model_copy(
        update={
            "questions": tuple(q for q in state.questions if q is not question),
            "decided": (*state.decided, ToolSucceeded(call_id=question.call_id, output=a.text)),
            "records": (*state.records, record)[-MAX_RECORDS:],
        }
    )

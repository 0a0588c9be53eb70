"""Gating one model turn's tool calls: what runs at once, what waits for a human, what is refused.

Pure: called by the loop when a reply arrives. Each call ends up in exactly one of three places:
an outcome decided now (`decided`), an open request (`approvals` / `questions`), or neither,
which means it runs when no request of the turn is open any more. The gate returns the sorted
`Turn`; the loop moves the run to `acting` with it (`capstan.core.transitions`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

from capstan.core import budgets, nudges, policy
from capstan.core.finish import finish_answer
from capstan.core.messages import ToolCall
from capstan.core.state import MAX_RECORDS, RunState, Turn
from capstan.core.steering import ApprovalRecord, ApprovalRequest, Question
from capstan.core.tooling import ASK_USER_TOOL, FINISH_TOOL, ToolFailed, ToolInfo

__all__ = ["expire_requests", "gate_turn", "open_requests"]


def gate_turn(
    state: RunState, calls: tuple[ToolCall, ...]
) -> tuple[Turn, tuple[ApprovalRecord, ...]]:
    """Sort the turn's calls: the turn to act on, and the records of policy denials."""
    decided: list[ToolFailed] = []
    approvals: list[ApprovalRequest] = []
    questions: list[Question] = []
    records: list[ApprovalRecord] = []
    cap = budgets.limit(state, "tool_calls")
    allowed = None if cap is None else max(int(cap) - state.usage.tool_calls, 0)
    for call in calls:
        verdict = _gate(state, call, alone=len(calls) == 1)
        if allowed is not None and (verdict is None or isinstance(verdict, ApprovalRequest)):
            if allowed <= 0:
                verdict = ToolFailed(
                    call_id=call.id, failure="not_run", error=nudges.budget_tool_calls()
                )
            allowed -= 1
        if isinstance(verdict, ToolFailed):
            decided.append(verdict)
            if verdict.failure == "denied":
                records.append(_policy_record(state, call, verdict.error))
        elif isinstance(verdict, ApprovalRequest):
            approvals.append(verdict)
        elif isinstance(verdict, Question):
            questions.append(verdict)
    turn = Turn(
        calls=calls,
        decided=tuple(decided),
        approvals=tuple(approvals),
        questions=tuple(questions),
    )
    return turn, tuple(records)


Verdict = ToolFailed | ApprovalRequest | Question | None


def _gate(state: RunState, call: ToolCall, *, alone: bool) -> Verdict:
    assert state.catalog is not None
    if call.name == FINISH_TOOL:
        if not alone:
            return ToolFailed(call_id=call.id, failure="not_run", error=nudges.finish_not_alone())
        return ToolFailed(
            call_id=call.id, failure="invalid_arguments", error=finish_answer(call)[1] or ""
        )
    if call.name == ASK_USER_TOOL:
        return _question(state, call)
    if call.name not in state.catalog.names:
        error = nudges.unknown_tool(call.name, state.catalog.names)
        return ToolFailed(call_id=call.id, failure="unknown_tool", error=error)
    return _by_policy(state, call, state.catalog.tools.get(call.name, ToolInfo()))


def _by_policy(state: RunState, call: ToolCall, info: ToolInfo) -> Verdict:
    problem = policy.check_arguments(
        call.name, info, state.spec, call.arguments, state.legacy_policy
    )
    if problem is not None:
        failure = "denied" if problem.startswith("policy denies") else "invalid_arguments"
        return ToolFailed(call_id=call.id, failure=failure, error=problem)
    decision, reason = policy.policy_for(
        call.name, info, state.spec, state.rule_of_two, state.legacy_policy
    )
    if decision == "deny":
        return ToolFailed(call_id=call.id, failure="denied", error=f"denied by policy: {reason}")
    if decision == "allow" or call.name in state.steering.always:
        return None
    return ApprovalRequest(
        request_id=f"{state.run_id}/{state.step}/{call.id}",
        call_id=call.id,
        step=state.step,
        tool=call.name,
        arguments=call.arguments,
        args_hash=policy.arguments_hash(call.name, call.arguments),
        reason=reason,
        expires_at=_expiry(state),
    )


def _question(state: RunState, call: ToolCall) -> Verdict:
    try:
        args = json.loads(call.arguments) if isinstance(call.arguments, str) else None
    except json.JSONDecodeError:
        args = None
    question = args.get("question") if isinstance(args, dict) else None
    options = args.get("options") if isinstance(args, dict) else None
    valid_options = options is None or (
        isinstance(options, list) and all(isinstance(o, str) for o in options)
    )
    if not isinstance(question, str) or not valid_options:
        error = "ask_user needs {'question': string, 'options': optional list of strings}"
        return ToolFailed(call_id=call.id, failure="invalid_arguments", error=error)
    return Question(
        request_id=f"{state.run_id}/{state.step}/{call.id}",
        call_id=call.id,
        step=state.step,
        question=question,
        options=options,
        expires_at=_expiry(state),
    )


def _expiry(state: RunState) -> datetime:
    assert state.now is not None, "the interpreter folds a Boundary before every decision"
    return state.now + timedelta(seconds=state.spec.approval_timeout_seconds)


def _policy_record(state: RunState, call: ToolCall, reason: str) -> ApprovalRecord:
    return ApprovalRecord(
        request_id=f"{state.run_id}/{state.step}/{call.id}",
        tool=call.name,
        action="policy_deny",
        at=state.now,
        args_hash=policy.arguments_hash(call.name, call.arguments),
        reason=reason,
    )


def open_requests(state: RunState) -> list[ApprovalRequest | Question]:
    return [*state.turn.approvals, *state.turn.questions]


def expire_requests(state: RunState, now: datetime) -> RunState:
    """Settle overdue requests: denied as `expired`, or (by the spec) a requested cancellation,
    which the boundary then records as the run's end."""
    overdue = [r for r in open_requests(state) if r.expires_at <= now]
    if not overdue:
        return state
    if state.spec.approval_expiry == "cancel":
        first = overdue[0].request_id
        reason = f"request {first} expired without a decision"
        return replace(state, steering=replace(state.steering, cancel_reason=reason))
    gone = {r.request_id for r in overdue}
    failures = tuple(
        ToolFailed(
            call_id=r.call_id,
            failure="expired",
            error=f"no decision before {r.expires_at.isoformat()}: the request expired",
        )
        for r in overdue
    )
    records = tuple(
        ApprovalRecord(
            request_id=r.request_id,
            tool=r.tool if isinstance(r, ApprovalRequest) else ASK_USER_TOOL,
            action="expired",
            at=now,
            reason="expired without a decision",
        )
        for r in overdue
    )
    turn = state.turn
    turn = replace(
        turn,
        approvals=tuple(r for r in turn.approvals if r.request_id not in gone),
        questions=tuple(q for q in turn.questions if q.request_id not in gone),
        decided=turn.decided + failures,
    )
    kept = (state.steering.records + records)[-MAX_RECORDS:]
    return replace(state, turn=turn, steering=replace(state.steering, records=kept))

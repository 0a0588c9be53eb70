"""An AG-UI request read for Capstan (capstan.api.agui_input): the body, its new user message,
the answers to interrupts as steering inputs, and the interrupts a waiting run raises."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import ResumeEntry, RunAgentInput

from capstan.api.agui_events import tool_call_id
from capstan.api.agui_input import (
    CANCELLED_APPROVAL,
    CANCELLED_QUESTION,
    answer_for,
    input_id,
    interrupt_for,
    interrupt_id,
    parse_input,
    user_text,
)
from capstan.api.errors import ApiError
from capstan.core.content import BlobRef
from capstan.core.steering import Answer, ApprovalRequest, Decision, Question

EXPIRES = datetime(2026, 1, 2, tzinfo=UTC)
APPROVAL = ApprovalRequest(
    request_id="thread-acme:t/2/call_1",
    call_id="call_1",
    step=2,
    tool="write_file",
    arguments='{"path": "a.txt"}',
    args_hash="h1",
    reason="write_file changes state",
    expires_at=EXPIRES,
)
QUESTION = Question(
    request_id="thread-acme:t/helper-1.0/3/call_9",  # a delegated child's
    call_id="call_9",
    step=3,
    question="Which file?",
    options=["a.txt", "b.txt"],
    expires_at=EXPIRES,
)


def request(**fields: Any) -> RunAgentInput:
    return RunAgentInput.model_validate({"threadId": "t", "runId": "r", "messages": [], **fields})


def refused(call: Any, status: int = 422) -> dict[str, Any]:
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.status == status
    return {"field": caught.value.detail.field, "message": caught.value.detail.message}


def test_the_body_is_agui_s_run_agent_input() -> None:
    raw = {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": "1", "role": "user", "content": "hi"}],
    }
    assert parse_input(json.dumps(raw).encode()).thread_id == "t"
    assert refused(lambda: parse_input(b"{nope"))["field"] == "body"
    assert refused(lambda: parse_input(b"[]"))["field"] == "body"
    missing = refused(lambda: parse_input(b'{"runId": "r", "messages": []}'))
    assert missing["field"] == "body.threadId" and "\n" not in missing["message"]
    wizard = {**raw, "messages": [{"id": "1", "role": "wizard", "content": "x"}]}
    assert refused(lambda: parse_input(json.dumps(wizard).encode()))["field"].startswith(
        "body.messages.0"
    )


def test_the_new_user_message_is_the_last_one_when_it_is_the_users() -> None:
    user = {"id": "u1", "role": "user", "content": "list"}
    said = {"id": "a1", "role": "assistant", "content": "done"}
    assert user_text(request(messages=[user])) is not None
    assert user_text(request(messages=[user, said])) is None
    assert user_text(request()) is None
    parts = {
        "id": "u2",
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    found = user_text(request(messages=[said, parts]))
    assert found is not None and (found.id, found.text) == ("u2", "a\n\nb")
    image = {"type": "image", "source": {"type": "url", "value": "https://x/a.png"}}
    with_image = {"id": "u3", "role": "user", "content": [image]}
    assert refused(lambda: user_text(request(messages=[with_image])))["field"] == (
        "body.messages.0.content"
    )
    empty = {"id": "u4", "role": "user", "content": "  "}
    assert "empty" in refused(lambda: user_text(request(messages=[empty])))["message"]
    long_id = {"id": "u" * 201, "role": "user", "content": "x"}
    assert refused(lambda: user_text(request(messages=[long_id])))["field"] == "body.messages.0.id"


def entry(payload: Any = None, status: str = "resolved") -> ResumeEntry:
    return ResumeEntry(interrupt_id="i", status=status, payload=payload)  # type: ignore[arg-type]


def test_approval_answers_become_bound_decisions() -> None:
    approve = answer_for(entry({"action": "approve"}), APPROVAL, "body.resume.0", "run-1")
    assert approve == Decision(
        id=input_id("run-1", interrupt_id(APPROVAL)),
        request_id=APPROVAL.request_id,
        args_hash="h1",  # bound to the call the reviewer was shown
        action="approve",
    )
    deny = answer_for(entry({"action": "deny"}), APPROVAL, "w", "run-1")
    assert isinstance(deny, Decision) and deny.reason == "The user denied this call."
    edit = answer_for(entry({"action": "approve", "arguments": {"path": "b"}}), APPROVAL, "w", "r")
    assert isinstance(edit, Decision) and edit.action == "edit"
    assert json.loads(str(edit.arguments)) == {"path": "b"}
    stale = answer_for(entry({"action": "always", "args_hash": "old"}), APPROVAL, "w", "r")
    assert isinstance(stale, Decision) and stale.args_hash == "old"  # the run refuses it
    cancelled = answer_for(entry(status="cancelled"), APPROVAL, "w", "r")
    assert isinstance(cancelled, Decision) and cancelled.action == "deny"
    assert cancelled.reason == CANCELLED_APPROVAL
    for bad in (None, "yes", {"action": "maybe"}, {"action": "approve", "extra": 1}):
        problem = refused(lambda bad=bad: answer_for(entry(bad), APPROVAL, "body.resume.3", "r"))
        assert problem["field"] == "body.resume.3.payload", bad
    edit_no_args = refused(lambda: answer_for(entry({"action": "edit"}), APPROVAL, "w", "r"))
    assert "arguments" in edit_no_args["message"]
    deny_args = {"action": "deny", "arguments": {"path": "b"}}
    assert refused(lambda: answer_for(entry(deny_args), APPROVAL, "w", "r"))["field"] == (
        "w.payload.arguments"
    )


def test_question_answers() -> None:
    for payload in ("b.txt", {"text": "b.txt"}):
        answer = answer_for(entry(payload), QUESTION, "w", "r")
        assert answer == Answer(
            id=input_id("r", interrupt_id(QUESTION)), request_id=QUESTION.request_id, text="b.txt"
        )
    cancelled = answer_for(entry(status="cancelled"), QUESTION, "w", "r")
    assert isinstance(cancelled, Answer) and cancelled.text == CANCELLED_QUESTION
    for bad in (None, 3, {"text": ""}, "  ", {"answer": "x"}):
        assert (
            refused(lambda bad=bad: answer_for(entry(bad), QUESTION, "w", "r"))["field"]
            == "w.payload"
        )


def test_input_ids_are_one_per_agui_run_and_interrupt() -> None:
    assert input_id("r", "i") == input_id("r", "i")
    assert len({input_id("r", "i"), input_id("r2", "i"), input_id("r", "i2")}) == 3
    assert len(input_id("r", "i")) <= 200


def test_interrupts_name_the_request_the_call_and_the_answer_they_take() -> None:
    shown = interrupt_for(APPROVAL, "thread-acme:t", "key", str).model_dump(by_alias=True)
    assert shown["id"] == interrupt_id(APPROVAL) and shown["reason"] == "tool_approval"
    assert shown["toolCallId"] == tool_call_id("key", 2, "call_1")
    assert shown["expiresAt"] == "2026-01-02T00:00:00+00:00"
    assert shown["responseSchema"]["required"] == ["action"]
    assert shown["metadata"]["capstan"]["args_hash"] == "h1"
    asked = interrupt_for(QUESTION, "thread-acme:t", "key", str).model_dump(by_alias=True)
    assert asked["reason"] == "question" and asked["message"] == "Which file?"
    assert "toolCallId" not in asked  # a child's call is not in this run's stream
    assert asked["metadata"]["capstan"]["options"] == ["a.txt", "b.txt"]
    big = APPROVAL.model_copy(update={"arguments": BlobRef(sha256="0" * 64, size=9000)})
    long = interrupt_for(big, "thread-acme:t", "key", lambda _: "x" * 9000)
    cut = long.model_dump(by_alias=True)["metadata"]["capstan"]
    assert len(cut["arguments"]) == 4001 and cut["arguments_cut"] == 5000


def test_interrupt_ids_pin_what_was_shown() -> None:
    """A thread's runs share a workflow id and restart their steps: the same request id may
    name a later run's request. The interrupt's id carries what was shown, so an answer to one
    never settles the other."""
    later = APPROVAL.model_copy(update={"args_hash": "h2"})
    assert interrupt_id(APPROVAL).startswith(APPROVAL.request_id + "#")
    assert interrupt_id(APPROVAL) != interrupt_id(later)
    reworded = QUESTION.model_copy(update={"question": "Which other file?"})
    assert interrupt_id(QUESTION) != interrupt_id(reworded)


def test_approving_arguments_the_interrupt_cut_off_needs_their_hash() -> None:
    big = APPROVAL.model_copy(update={"arguments": BlobRef(sha256="0" * 64, size=9000)})
    problem = refused(lambda: answer_for(entry({"action": "approve"}), big, "w", "r"))
    assert problem["field"] == "w.payload.args_hash"
    bound = answer_for(entry({"action": "approve", "args_hash": "h1"}), big, "w", "r")
    assert isinstance(bound, Decision) and bound.args_hash == "h1"
    denied = answer_for(entry({"action": "deny"}), big, "w", "r")  # refusing needs no proof
    assert isinstance(denied, Decision) and denied.action == "deny"

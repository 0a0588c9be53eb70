"""The pure parts of the A2A server: task ids and contexts, runs as tasks, messages as
decisions, the agent card, errors as the protocol's (no server: the integration tests in
tests/integration/test_a2a.py call it as an A2A client would)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from a2a.types import Message, Part, Role, TaskState
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
)
from google.protobuf import json_format, struct_pb2

from capstan.api.a2a_card import agent_card, describe
from capstan.api.a2a_errors import UNAVAILABLE, as_a2a
from capstan.api.a2a_input import DENIED, Decide, Reply, Said, read_message, verdict
from capstan.api.a2a_tasks import (
    Ending,
    TaskRef,
    asks,
    context_of,
    ended_task,
    progress_update,
    running_task,
)
from capstan.api.errors import ApiError
from capstan.audit.events import RunEvent
from capstan.client.runs import RejectedError, RunNotFoundError
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.steering import ApprovalRequest, PendingView, Question
from capstan.runtime.temporal_connection import TemporalConnectError

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
EXECUTION = "0196f3b2-8a1c-7d3e-9f00-123456789abc"
REF = TaskRef("thread-acme:ctx-1", EXECUTION)


def approval(request_id: str = "run-1/3/c1", tool: str = "write_file") -> ApprovalRequest:
    return ApprovalRequest(
        request_id=request_id,
        call_id="c1",
        step=3,
        tool=tool,
        arguments='{"path": "a.txt", "content": "hi"}',
        args_hash="h" * 64,
        reason="policy: ask",
        expires_at=NOW,
    )


def question(request_id: str = "run-1/4/c2") -> Question:
    return Question(
        request_id=request_id,
        call_id="c2",
        step=4,
        question="Which colour?",
        options=["blue", "red"],
        expires_at=NOW,
    )


def waiting(*requests: ApprovalRequest | Question) -> PendingView:
    return PendingView(
        run_id="run-1",
        approvals=[r for r in requests if isinstance(r, ApprovalRequest)],
        questions=[r for r in requests if isinstance(r, Question)],
    )


def data(value: dict[str, Any]) -> Part:
    parsed = struct_pb2.Value()
    json_format.ParseDict(value, parsed)
    return Part(data=parsed)


def test_a_task_id_names_a_run_and_the_first_execution_of_its_chain() -> None:
    assert REF.task_id == f"thread-acme:ctx-1~{EXECUTION}"
    assert TaskRef.parse(REF.task_id) == REF
    assert TaskRef.parse("run-abc") == TaskRef("run-abc")  # a run outside threads: its id
    assert TaskRef.parse("run-abc~not-an-execution") is None
    assert TaskRef.parse(f"~{EXECUTION}") is None


def test_a_context_is_the_thread_of_the_tenants_run() -> None:
    assert context_of("thread-acme:ctx-1", "acme") == "ctx-1"
    assert context_of("thread-ctx-1", "default") == "ctx-1"
    assert context_of("run-abc", "acme") == "run-abc"  # its own context
    assert context_of("thread-other:ctx-1", "acme") == "thread-other:ctx-1"


def test_a_running_run_is_working_or_input_required() -> None:
    asked = running_task(REF, "ctx-1", waiting(approval(), question()), NOW)
    working = running_task(REF, "ctx-1", waiting(approval()), NOW, ignore=frozenset({"run-1/3/c1"}))
    paused = running_task(REF, "ctx-1", PendingView(run_id="run-1", paused=True), NOW)
    assert asked.id == REF.task_id and asked.context_id == "ctx-1"
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    text, listed = asked.status.message.parts
    assert "Approve write_file" in text.text and "Which colour? Options: blue, red." in text.text
    assert "Several requests are open" in text.text
    shown = json_format.MessageToDict(listed.data)
    assert [a["request_id"] for a in shown["approvals"]] == ["run-1/3/c1"]
    assert [q["question"] for q in shown["questions"]] == ["Which colour?"]
    assert asked.status.message.role == Role.ROLE_AGENT
    assert asked.status.message.task_id == REF.task_id
    assert working.status.state == TaskState.TASK_STATE_WORKING  # the decided one is not asked
    assert not working.status.HasField("message")
    assert paused.status.message.parts[0].text == "the run is paused"


def test_a_followed_run_asks_once_its_history_announced_its_requests() -> None:
    own = approval("run-1/3/c1")
    childs = approval("run-1/helper-3.0/2/c4")  # a delegated child's: announced in its history
    assert not asks("run-1", waiting(own), frozenset(), set())  # the query is ahead
    assert asks("run-1", waiting(own), frozenset(), {"run-1/3/c1"})
    assert asks("run-1", waiting(childs), frozenset(), set())
    assert not asks("run-1", waiting(own), frozenset({"run-1/3/c1"}), {"run-1/3/c1"})  # decided
    assert not asks("run-1", PendingView(run_id="run-1"), frozenset(), set())


@pytest.mark.parametrize(
    ("ending", "state", "text"),
    [
        (
            Ending(TerminalReason.COMPLETED, NOW, output="done"),
            TaskState.TASK_STATE_COMPLETED,
            None,
        ),
        (
            Ending(TerminalReason.CANCELLED, NOW, error="enough"),
            TaskState.TASK_STATE_CANCELED,
            "the run ended cancelled: enough",
        ),
        (
            Ending(TerminalReason.MAX_STEPS, NOW, output="partial"),
            TaskState.TASK_STATE_FAILED,
            "the run ended max_steps",
        ),
        (Ending(None, NOW, cancelled=True), TaskState.TASK_STATE_CANCELED, "the run ended outside"),
        (
            Ending(None, NOW, error="Workflow terminated"),
            TaskState.TASK_STATE_FAILED,
            "the run ended outside Capstan: Workflow terminated",
        ),
    ],
)
def test_a_runs_ending_is_the_tasks_final_state(
    ending: Ending, state: TaskState, text: str | None
) -> None:
    task = ended_task(REF, "ctx-1", ending)
    assert task.status.state == state
    if text is None:
        assert not task.status.HasField("message")
    else:
        assert task.status.message.parts[0].text.startswith(text)
    if ending.output is None:
        assert not task.artifacts
    else:
        (artifact,) = task.artifacts  # any output is the artifact, whatever the ending
        assert artifact.name == "output" and artifact.parts[0].text == ending.output


def test_a_typed_answer_is_a_data_part() -> None:
    ending = Ending(TerminalReason.COMPLETED, NOW, output={"total": 12}, output_format="json")
    (part,) = ended_task(REF, "ctx-1", ending).artifacts[0].parts
    assert part.media_type == "application/json"
    assert json_format.MessageToDict(part.data) == {"total": 12}


def test_steps_are_working_updates_with_the_event() -> None:
    replied = RunEvent(seq=4, kind="model_replied", time=NOW.isoformat(), step=1, summary="-> ls")
    update = progress_update(REF, "ctx-1", replied)
    assert update is not None and update.status.state == TaskState.TASK_STATE_WORKING
    assert update.status.message.parts[0].text == "model_replied: -> ls"
    assert update.status.message.message_id == f"{REF.task_id}/event/4"
    assert json_format.MessageToDict(update.metadata)["capstan_event"]["seq"] == 4
    for kind in ("run_ended", "approval_requested", "continued_as_new"):
        assert progress_update(REF, "ctx-1", RunEvent(kind=kind, time=NOW.isoformat())) is None


def test_a_message_is_its_text_and_data() -> None:
    said = read_message(
        Message(
            message_id="m",
            role=Role.ROLE_USER,
            parts=[Part(text="first"), data({"decision": "approve"}), Part(text="second")],
        )
    )
    assert said == Said("first\nsecond", ({"decision": "approve"},))
    assert said.as_text() == 'first\nsecond\n{"decision": "approve"}'
    with pytest.raises(ContentTypeNotSupportedError):
        read_message(Message(parts=[Part(url="https://example.com/a.pdf")]))
    listed = struct_pb2.Value()
    json_format.ParseDict([1, 2], listed)
    with pytest.raises(InvalidParamsError, match="JSON object"):
        read_message(Message(parts=[Part(data=listed)]))


@pytest.mark.parametrize(
    ("text", "action", "reason"),
    [
        ("approve", "approve", ""),
        ("Approved.", "approve", ""),
        ("yes, go ahead", "approve", "go ahead"),
        ("deny", "deny", DENIED),
        ("deny: not today", "deny", "not today"),
        ("No - it overwrites the report", "deny", "it overwrites the report"),
    ],
)
def test_words_decide_the_one_open_approval(text: str, action: str, reason: str) -> None:
    decided = verdict(Said(text), waiting(approval()))
    assert decided == Decide(approval(), action, reason)  # type: ignore[arg-type]


def test_text_answers_the_one_open_question() -> None:
    assert verdict(Said("blue"), waiting(question())) == Reply(question(), "blue")


def test_what_is_no_decision_is_refused_with_how_to_reply() -> None:
    with pytest.raises(InvalidParamsError, match=r"reply 'approve', or 'deny' and why"):
        verdict(Said("perhaps later"), waiting(approval()))
    with pytest.raises(InvalidParamsError, match="waits on 2 requests"):
        verdict(Said("approve"), waiting(approval(), approval("run-1/3/c9")))
    with pytest.raises(InvalidParamsError, match="send it as text"):
        verdict(Said(""), waiting(question()))


def test_a_data_part_names_the_request_and_the_decision() -> None:
    both = waiting(approval(), approval("run-1/3/c9"), question())
    assert verdict(
        Said("", ({"decision": "deny", "request_id": "run-1/3/c9", "reason": "no"},)), both
    ) == Decide(approval("run-1/3/c9"), "deny", "no")
    assert verdict(Said("", ({"decision": "always", "request_id": "run-1/3/c1"},)), both) == Decide(
        approval(), "always"
    )
    edited = verdict(
        Said("", ({"decision": "approve", "request_id": "run-1/3/c1", "arguments": {"a": 1}},)),
        both,
    )
    assert edited == Decide(approval(), "edit", "", '{"a": 1}')
    assert verdict(Said("", ({"answer": "red"},)), both) == Reply(question(), "red")
    # the hash the caller was shown travels with the decision: the run refuses another call
    bound = verdict(
        Said("", ({"decision": "approve", "request_id": "run-1/3/c1", "args_hash": "seen"},)),
        both,
    )
    assert bound == Decide(approval(), "approve", "", args_hash="seen")


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (({"decision": "approve", "request_id": "nope"},), "no open approval request 'nope'"),
        (({"decision": "approve"},), 'name the approval request with "request_id"'),
        (({"answer": "x", "request_id": "run-1/3/c1"},), "no open question 'run-1/3/c1'"),
        (({"decision": "approve", "answer": "x"},), 'either "decision" or "answer"'),
        (({"decision": "maybe"},), "decision"),
        (({"decision": "deny", "arguments": {}},), '"arguments" edits a call'),
        (({"decision": "approve", "why": "x"},), "why"),
        (({"decision": "approve"}, {"answer": "x"}), "one decision or answer per message"),
    ],
)
def test_a_bad_decision_part_is_invalid_params(
    parts: tuple[dict[str, Any], ...], message: str
) -> None:
    with pytest.raises(InvalidParamsError, match=message):
        verdict(Said("", parts), waiting(approval(), approval("run-1/3/c9"), question()))


def test_the_card_describes_the_definition() -> None:
    spec = RunSpec(
        task="(card)",
        system_prompt="You read files\nand report.\n\nNever write.",
        allowed_tools=("read_file", "finish"),
    )
    card = agent_card("reader", spec, "https://capstan.example/a2a/reader/", "1.2.3")
    assert card.name == "reader" and card.version == "1.2.3"
    assert card.description == "You read files and report."
    (skill,) = card.skills
    assert skill.id == "reader" and list(skill.tags) == ["capstan", "read_file"]
    assert list(card.default_output_modes) == ["text/plain"]
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    typed = spec.model_copy(update={"output_schema": {"type": "object"}, "system_prompt": None})
    typed_card = agent_card("typed", typed, "https://x/a2a/typed/", "1")
    assert list(typed_card.default_output_modes) == ["application/json"]
    assert describe("typed", typed) == typed_card.description
    assert "typed" in typed_card.description
    assert len(describe("long", spec.model_copy(update={"system_prompt": "w " * 900}))) == 400


def test_failures_are_the_protocols_errors(caplog: pytest.LogCaptureFixture) -> None:
    assert isinstance(as_a2a(ApiError(404, "run_not_found", "no run 'x'")), TaskNotFoundError)
    assert isinstance(as_a2a(ApiError(403, "forbidden", "no scope")), InvalidRequestError)
    assert isinstance(as_a2a(ApiError(422, "invalid", "bad")), InvalidParamsError)
    assert isinstance(as_a2a(RunNotFoundError("no run 'x'")), TaskNotFoundError)
    refused = as_a2a(RejectedError("stale hash"))
    assert isinstance(refused, InvalidParamsError) and "stale hash" in refused.message
    away = as_a2a(TemporalConnectError("no Temporal", unreachable=True))
    assert isinstance(away, InternalError) and away.message == UNAVAILABLE
    with caplog.at_level(logging.ERROR, logger="capstan.api"):
        bug = as_a2a(RuntimeError("secret detail"))
    assert isinstance(bug, InternalError) and "secret detail" not in bug.message
    assert "secret detail" in caplog.text  # the server log has it

"""A run's history as AG-UI events (capstan.api.agui_events): what each entry says, and that the
list only ever grows at its end, whatever point of the history it is derived at."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import BaseEvent

from capstan.api.agui_events import RESULT_MAX_CHARS, chain_key, derive, tool_call_id
from capstan.audit.history import Entry
from capstan.core.activity_io import CallModelInput, ModelReply, RunToolInput
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.spec import RunResult, TerminalReason
from capstan.core.steering import ApprovalRequest, Decision
from capstan.core.tooling import ToolFailed, ToolSucceeded
from capstan.core.workflow_io import OpenRequests

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REF = BlobRef(sha256="0" * 64, size=1)
KEY = chain_key("first-execution")


class History:
    """The entries of one execution, numbered as Temporal numbers its events."""

    def __init__(self, start: int = 1) -> None:
        self.entries: list[Entry] = []
        self.next = start

    def number(self) -> int:
        self.next += 1
        return self.next - 1

    def model(
        self, step: int, text: str = "", *calls: ToolCall, seen: tuple[Message, ...] = ()
    ) -> Entry:
        data = CallModelInput(
            run_id="r", step=step, profile="p", conversation=None, new_messages=seen, tools=REF
        )
        entry = Entry("activity", "x", self.number(), T0, name=ActivityName.CALL_MODEL, data=data)
        self.entries.append(entry)
        message = Message(role="assistant", content=text, tool_calls=calls, origin="model")
        entry.result = ModelReply(
            message=message, conversation=REF, usage=Usage(), stop_reason="stop", model="m"
        )
        entry.finished_event_id = self.number()
        return entry

    def failed_model(self, step: int) -> None:
        entry = self.model(step)
        entry.result, entry.error = None, "model_error"

    def tool(self, step: int, call: str, outcome: Any) -> None:
        data = RunToolInput(
            run_id="r", step=step, call_id=call, name="t", arguments="{}", idempotency_key="k"
        )
        entry = Entry("activity", "x", self.number(), T0, name=ActivityName.RUN_TOOL, data=data)
        entry.result, entry.finished_event_id = outcome, self.number()
        self.entries.append(entry)

    def add(self, kind: str, data: Any = None, error: str | None = None) -> None:
        self.entries.append(Entry(kind, "x", self.number(), T0, data=data, error=error))

    def end(
        self, reason: TerminalReason = TerminalReason.COMPLETED, output: str | None = None
    ) -> None:
        self.add("run_ended", RunResult(run_id="r", terminal_reason=reason, output=output))


def observation(call: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=call, name="t", content=text, origin="tool")


def shown(events: list[BaseEvent]) -> list[tuple[str, ...]]:
    """Each event as its type and the fields that say what it is about."""
    out = []
    for e in events:
        data = e.model_dump()
        fields = (
            "step_name",
            "message_id",
            "parent_message_id",
            "delta",
            "tool_call_id",
            "tool_call_name",
            "content",
        )
        out.append((e.type.value, *(str(data[f]) for f in fields if data.get(f) is not None)))
    return out


def as_of(entries: list[Entry], last: int) -> list[Entry]:
    """The entries as a reader saw them when history ended at event `last`."""
    out = []
    for e in entries:
        if e.event_id > last:
            continue
        unfinished = e.finished_event_id > last
        out.append(
            replace(copy.copy(e), result=None, error=None, finished_event_id=0) if unfinished else e
        )
    return out


def two_step_run() -> History:
    h = History()
    h.add("run_started")
    h.model(1, "Let me look.", ToolCall(id="a", name="list_dir", arguments='{"path": "."}'))
    h.tool(1, "a", ToolSucceeded(call_id="a", output="a.txt\nb.txt"))
    h.model(
        2,
        "",
        ToolCall(id="f", name="finish", arguments='{"answer": "two files"}'),
        seen=(observation("a", "a.txt\nb.txt"),),
    )
    h.end(output="two files")
    return h


def test_a_run_in_ag_ui_words() -> None:
    events, fold = derive(KEY, [two_step_run().entries], str)
    m1, m2 = f"{KEY}:m0.2", f"{KEY}:m0.6"
    a, f = tool_call_id(KEY, 1, "a"), tool_call_id(KEY, 2, "f")
    assert shown(events) == [
        ("STEP_STARTED", "step 1"),
        ("TEXT_MESSAGE_START", m1),
        ("TEXT_MESSAGE_CONTENT", m1, "Let me look."),
        ("TEXT_MESSAGE_END", m1),
        ("TOOL_CALL_START", m1, a, "list_dir"),  # its parent: the reply
        ("TOOL_CALL_ARGS", '{"path": "."}', a),
        ("TOOL_CALL_END", a),
        ("TOOL_CALL_RESULT", f"{a}.result", a, "a.txt\nb.txt"),
        ("STEP_FINISHED", "step 1"),
        ("STEP_STARTED", "step 2"),
        ("TEXT_MESSAGE_START", m2),
        ("TEXT_MESSAGE_END", m2),
        ("TOOL_CALL_START", m2, f, "finish"),
        ("TOOL_CALL_ARGS", '{"answer": "two files"}', f),
        ("TOOL_CALL_END", f),
        ("TOOL_CALL_RESULT", f"{f}.result", f, "The run ended (completed) with this call."),
        ("STEP_FINISHED", "step 2"),
        ("TEXT_MESSAGE_START", f"{KEY}:answer"),
        ("TEXT_MESSAGE_CONTENT", f"{KEY}:answer", "two files"),
        ("TEXT_MESSAGE_END", f"{KEY}:answer"),
    ]
    assert fold.ending is not None and fold.ending.reason == "completed"
    assert fold.ending.answer == "two files" and fold.step is None and not fold.calls


def test_the_events_only_grow_at_their_end() -> None:
    """Derived at every point of the history, across a continue-as-new, each list is the start
    of the next one: an event's index never changes."""
    first = History()
    first.add("run_started")
    first.model(1, "Reading.", ToolCall(id="a", name="write_file", arguments="{}"))
    request = approval("r/1/a")
    second = History()
    second.add("open_requests", OpenRequests(approvals=[request]))
    second.add("signal", Decision(request_id=request.request_id, args_hash="h", action="approve"))
    second.tool(1, "a", ToolSucceeded(call_id="a", output="wrote"))
    second.model(2, "Done.", ToolCall(id="f", name="finish", arguments="{}"))
    second.end(output="Done.")
    before: list[BaseEvent] = []
    cuts = [(n, 0) for n in range(first.next)] + [(first.next, n) for n in range(second.next)]
    for closed, last in cuts:
        runs = [as_of(first.entries, closed)] + ([as_of(second.entries, last)] if last else [])
        events, _ = derive(KEY, runs, str)
        assert events[: len(before)] == before, (closed, last)
        before = events
    # deriving the closed execution once and the current one from its state is the same
    done, fold = derive(KEY, [first.entries], str)
    rest, _ = derive(KEY, [second.entries], str, start=1, fold=fold)
    assert done + rest == before


def approval(request_id: str) -> ApprovalRequest:
    return ApprovalRequest(
        request_id=request_id,
        call_id=request_id.rsplit("/", 1)[-1],
        step=1,
        tool="write_file",
        arguments="{}",
        args_hash="h",
        reason="asks",
        expires_at=datetime(2026, 1, 2, tzinfo=UTC),
    )


def test_requests_are_tracked_until_settled_and_denials_become_results() -> None:
    h = History()
    h.model(
        1,
        "",
        ToolCall(id="a", name="write_file", arguments="{}"),
        ToolCall(id="b", name="write_file", arguments="{}"),
    )
    h.add("open_requests", OpenRequests(approvals=[approval("r/1/a"), approval("r/1/b")]))
    _, waiting = derive(KEY, [h.entries], str)
    assert list(waiting.requests) == ["r/1/a", "r/1/b"]
    h.add("signal", Decision(request_id="r/1/b", args_hash="h", action="deny", reason="no"))
    h.tool(1, "a", ToolFailed(call_id="a", failure="error", error="disk full"))
    h.model(
        2,
        "ok",
        seen=(observation("a", "ignored: already answered"), observation("b", "Denied: no")),
    )
    events, fold = derive(KEY, [h.entries], str)
    results = [e.model_dump() for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert [(r["tool_call_id"], r["content"]) for r in results] == [
        (tool_call_id(KEY, 1, "a"), "disk full"),
        (tool_call_id(KEY, 1, "b"), "Denied: no"),
    ]
    assert list(fold.requests) == ["r/1/a"]  # announced, and no decision for it yet


def test_a_failed_model_call_closes_its_message_and_the_step_goes_on() -> None:
    h = History()
    h.failed_model(1)
    h.model(1, "second try")
    events, fold = derive(KEY, [h.entries], str)
    assert [e.type.value for e in events] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "TEXT_MESSAGE_START",  # a new message, in the same step
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert fold.step == 1 and fold.message is None and fold.last_text == "second try"


def test_a_terminated_run_closes_what_is_open() -> None:
    h = History()
    h.model(1, "", ToolCall(id="a", name="list_dir", arguments="{}"))
    data = CallModelInput(
        run_id="r", step=2, profile="p", conversation=None, new_messages=(), tools=REF
    )
    h.entries.append(
        Entry("activity", "x", h.number(), T0, name=ActivityName.CALL_MODEL, data=data)
    )
    in_flight, fold = derive(KEY, [h.entries], str)
    assert fold.in_flight == 2 and fold.message == in_flight[-1].model_dump()["message_id"]
    h.add("run_ended", error="EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED")
    events, fold = derive(KEY, [h.entries], str)
    assert shown(events[len(in_flight) :]) == [
        ("TOOL_CALL_RESULT", f"{tool_call_id(KEY, 1, 'a')}.result", tool_call_id(KEY, 1, "a"),
         "Not run: the run ended (terminated) before this call ran."),
        ("TEXT_MESSAGE_END", str(fold.message or in_flight[-1].model_dump()["message_id"])),
        ("STEP_FINISHED", "step 2"),
    ]  # fmt: skip
    assert fold.ending is not None and fold.ending.reason == "terminated"


def test_an_answer_the_reply_already_said_is_not_repeated_and_results_are_capped() -> None:
    h = History()
    h.model(1, "The answer is 4.", ToolCall(id="a", name="read_file", arguments="{}"))
    h.tool(1, "a", ToolSucceeded(call_id="a", output="x" * (RESULT_MAX_CHARS + 10)))
    h.end(output="The answer is 4.")
    events, _ = derive(KEY, [h.entries], str)
    assert not any(f"{KEY}:answer" in str(e.model_dump()) for e in events)
    (result,) = [e.model_dump() for e in events if e.type.value == "TOOL_CALL_RESULT"][:1]
    assert result["content"].startswith("x" * RESULT_MAX_CHARS)
    assert result["content"].endswith("(10 more characters in the run's transcript)")


def test_refs_are_resolved_through_the_callable() -> None:
    ref = BlobRef(sha256="1" * 64, size=3, preview="big")
    h = History()
    h.model(1, "", ToolCall(id="a", name="t", arguments=ref))
    seen: list[BlobRef] = []

    def resolve(text: Any) -> str:
        if isinstance(text, BlobRef):
            seen.append(text)
            return '{"big": true}'
        return str(text)

    events, _ = derive(KEY, [h.entries], resolve)
    assert seen == [ref]
    assert any(e.model_dump().get("delta") == '{"big": true}' for e in events)


def test_ids_name_the_run() -> None:
    assert chain_key("a") != chain_key("b") and len(chain_key("a")) == 12
    assert tool_call_id("k", 3, "call_1") == "k:c3.call_1"

"""Threads in the pure loop: a run that continues from a previous run's conversation head, the
result that records where the conversation stood, and the observations that close it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from capstan.client.schedules import ScheduleError, When, parse_duration
from capstan.client.threads import ThreadError, closing_messages, thread_workflow_id
from capstan.core import loop
from capstan.core.effects import CallModel
from capstan.core.messages import Message, ToolCall
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.state import RunState
from capstan.core.steering import CancelRequest, LiveMessage
from tests.unit.scripted import Driver, call, chain, fake_ref, reply


def test_a_fresh_run_starts_with_system_prompt_and_task() -> None:
    state = loop.initial_state(RunSpec(task="count"), "r")
    assert [m.origin for m in state.conversation.pending] == ["system", "task"]
    assert state.conversation.head is None and state.context.tokens == 0


def test_a_continued_run_starts_from_the_head_with_tail_and_task() -> None:
    head = fake_ref("previous")
    tail = (Message(role="user", content="left over", origin="live"),)
    spec = RunSpec(task="next", continues=head, continues_tail=tail, continues_tokens=1234)
    state = loop.initial_state(spec, "r")
    assert state.conversation.head == head
    pending = state.conversation.pending
    assert [(m.content, m.origin) for m in pending] == [("left over", "live"), ("next", "task")]
    assert all(m.role != "system" for m in pending)  # the system prompt is in the chain
    assert state.context.tokens == 1234


def test_a_thread_run_takes_its_task_from_the_start_signal() -> None:
    fresh = loop.initial_state(RunSpec(task="hello", thread="t"), "thread-t")
    assert [m.origin for m in fresh.conversation.pending] == ["system"]
    spec = RunSpec(task="again", thread="t", continues=fake_ref("h"))
    assert loop.initial_state(spec, "thread-t").conversation.pending == ()


def test_the_first_call_of_a_continued_run_sends_head_and_new_messages() -> None:
    head = fake_ref("previous")
    spec = RunSpec(task="next", continues=head, continues_tokens=100)
    d = Driver([reply("", call("finish", answer="ok"))])
    result, _ = d.run(spec)
    first = d.model_inputs[0].request
    assert first.conversation == head
    assert [m.content for m in first.new_messages] == ["next"]
    assert result.terminal_reason is TerminalReason.COMPLETED


def test_a_large_inherited_conversation_is_compacted_before_the_first_call() -> None:
    # usable window 9,000: an inherited 7,000 tokens is over compact_at (0.70)
    spec = RunSpec(task="next", continues=fake_ref("big"), continues_tokens=7_000)
    d = Driver([reply("", call("finish", answer="ok"))], models=chain(10_000))
    result, _ = d.run(spec)
    assert [c.request.strategy for c in d.compactions] == ["prune"]
    assert d.compactions[0].request.conversation == fake_ref("big")
    calls = [e for e in d.effects if isinstance(e, CallModel)]
    assert calls[0].request.conversation == fake_ref("c1")  # the pruned head
    assert result.terminal_reason is TerminalReason.COMPLETED


def test_the_result_records_head_tail_and_size() -> None:
    d = Driver([reply("", call("list_dir")), reply("", call("list_dir", "c2"))])
    result, state = d.run(RunSpec(task="t", max_steps=2))
    assert result.terminal_reason is TerminalReason.MAX_STEPS
    assert result.conversation == state.conversation.head is not None
    # the last turn's observation was never sent: it is the tail a next run starts with
    assert [(m.role, m.tool_call_id) for m in result.tail] == [("tool", "c2")]
    assert result.context_tokens == state.context.tokens > 0


def test_messages_not_yet_drained_are_kept_for_the_next_run() -> None:
    def human(state: RunState) -> list[object]:
        return [LiveMessage(text="are you there?", id="m1"), CancelRequest(reason="stop")]

    d = Driver([reply("", call("write_file", path="a", content="x"))], human=human)
    result, _ = d.run(RunSpec(task="t"))
    assert result.terminal_reason is TerminalReason.CANCELLED
    assert [m.content for m in result.tail] == ["are you there?"]


def test_closing_messages_answer_calls_the_run_left_open() -> None:
    finish = ToolCall(id="f1", name="finish", arguments='{"answer": "42"}')
    last = Message(role="assistant", tool_calls=(finish,), origin="model", step=3)
    closed = closing_messages(last, (), "completed")
    assert [(m.role, m.tool_call_id, m.name) for m in closed] == [("tool", "f1", "finish")]
    assert "ended (completed)" in str(closed[0].content)
    # calls answered in the tail are left alone; closing observations come first
    calls = (ToolCall(id="a", name="list_dir"), ToolCall(id="b", name="write_file"))
    waiting = Message(role="assistant", tool_calls=calls, origin="model")
    tail = (
        Message(role="tool", tool_call_id="a", content="ok", origin="tool"),
        Message(role="user", content="hi", origin="live"),
    )
    closed = closing_messages(waiting, tail, "cancelled")
    assert [m.tool_call_id for m in closed] == ["b", "a", None]
    assert "Not run" in str(closed[0].content)
    text_only = Message(role="assistant", content="done", origin="model")
    assert closing_messages(text_only, tail, "completed") == tail


def test_thread_ids() -> None:
    assert thread_workflow_id("support-42") == "thread-support-42"
    for bad in ("", "-x", "a b", "x" * 201, "a'b", "acme:support-42"):
        with pytest.raises(ThreadError):
            thread_workflow_id(bad)


def test_durations_and_timing() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("2d") == timedelta(days=2)
    assert parse_duration("1.5s") == timedelta(seconds=1.5)
    for bad in ("", "1x", "h", "1h 2q", "10"):
        with pytest.raises(ScheduleError):
            parse_duration(bad)
    assert When(cron="0 2 * * *").spec().cron_expressions == ["0 2 * * *"]
    with pytest.raises(ValidationError, match="exactly one"):
        When()
    with pytest.raises(ValidationError, match="exactly one"):
        When(cron="* * * * *", every=timedelta(hours=1))
    with pytest.raises(ValidationError, match="time zone"):
        When(cron="* * * * *", time_zone="Mars/Olympus")
    with pytest.raises(ValidationError, match="at least 1s"):
        When(every=timedelta(milliseconds=10))


def test_runs_of_a_thread_never_share_a_tool_calls_idempotency_key() -> None:
    # a thread's runs share the workflow id and start counting steps at 0 again
    keys = []
    for spec in (
        RunSpec(task="a", thread="t"),
        RunSpec(task="b", thread="t", continues=fake_ref("h1")),
        RunSpec(task="c", thread="t", continues=fake_ref("h2")),
    ):
        d = Driver([reply("", call("list_dir", path=".")), reply("", call("finish", answer="ok"))])
        d.run(spec, loop.initial_state(spec, "thread-t"))
        keys += [c.idempotency_key for effect in d.tool_inputs for c in effect.calls]
    assert len(keys) == 3 and len(set(keys)) == 3

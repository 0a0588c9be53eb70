"""No input can wedge a run (pure part): bounded inputs, a bounded state, ids applied once for
the life of the run, and continue-as-new before Temporal's limits while a run waits."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import pytest
from pydantic import TypeAdapter

from capstan.core import inputs, limits, loop
from capstan.core.agent_input import AgentInput
from capstan.core.content import BlobRef
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CallModel,
    ContinueAsNew,
    ModelReplied,
    Steered,
)
from capstan.core.idset import IdSet
from capstan.core.limits import APPLIED_IDS, INBOX_MESSAGES, HistoryGauge
from capstan.core.messages import Message
from capstan.core.policy import arguments_hash
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.state import MAX_DIAGNOSTICS, MAX_RECORDS, RunState, Steering
from capstan.core.steering import (
    STEERING_TYPES,
    Answer,
    ApprovalRecord,
    CancelRequest,
    Decision,
    LiveMessage,
    PauseRequest,
    ResumeRequest,
    SteeringBase,
    text_fields,
)
from tests.unit.scripted import T0, call, reply, started

SPEC = RunSpec(task="t", max_steps=6)
MB = "x" * (1024 * 1024)
STATE_JSON = TypeAdapter(RunState)


def ref(text: str) -> BlobRef:
    data = text.encode()
    return BlobRef(sha256=hashlib.sha256(data).hexdigest(), size=len(data), preview=text[:20])


def steer(state: RunState, *items: object) -> RunState:
    for item in items:
        state = loop.apply(state, Steered(input=item))  # type: ignore[arg-type]
    return state


def paused() -> RunState:
    return steer(started(SPEC), PauseRequest(id="first-pause"))


def inbox_texts(state: RunState) -> list[object]:
    return [m.content for m in state.steering.inbox]


# A repeated id is applied once, for the life of the run ----------------------------------------


def test_a_repeated_id_is_applied_once_after_5000_other_ids() -> None:
    state = steer(paused(), LiveMessage(text="hello", id="dup"))
    for i in range(2_500):  # 5,000 other ids, none of which queues a message
        state = steer(state, ResumeRequest(id=f"r{i}"), PauseRequest(id=f"p{i}"))
    state = steer(state, LiveMessage(text="hello again", id="dup"))
    assert inbox_texts(state) == ["hello"]
    assert len(state.steering.seen) == 5_002


def test_ids_survive_continue_as_new_and_the_json_round_trip() -> None:
    state = steer(paused(), *(LiveMessage(text=f"m{i}", id=f"m{i}") for i in range(50)))
    state = steer(state, *(ResumeRequest(id=f"x{i}") for i in range(5_000)))
    carried = AgentInput(spec=SPEC, carried=loop.carry_over(state))
    decoded = AgentInput.model_validate_json(carried.model_dump_json())
    assert decoded.carried is not None
    again = steer(decoded.carried, LiveMessage(text="m0 again", id="m0"), PauseRequest(id="x7"))
    assert inbox_texts(again) == [f"m{i}" for i in range(50)]
    assert again.steering.paused is False  # the repeated pause id x7 changed nothing
    # 8 bytes an id, in base64: 5,051 ids take ~54 KB of the carried state
    assert len(TypeAdapter(IdSet).dump_json(state.steering.seen)) < 5_051 * 11 + 20


def test_a_state_from_before_the_digests_keeps_its_ids() -> None:
    """Older histories carry `applied_ids` (the last 1,000 ids): they still count, and move
    into the digests at the next applied input."""
    legacy = STATE_JSON.dump_python(paused(), mode="json")
    legacy["steering"]["applied_ids"] = ["old-1", "old-2"]
    del legacy["steering"]["seen"]
    state = STATE_JSON.validate_python(legacy)
    state = steer(state, LiveMessage(text="again", id="old-1"), LiveMessage(text="new", id="n"))
    assert inbox_texts(state) == ["new"]
    assert state.steering.applied_ids == ()
    assert all(i in state.steering.seen for i in ("old-1", "old-2", "n"))


def test_idset_has_no_false_negatives_and_stays_sorted() -> None:
    rng = random.Random(7)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(20_000)]
    seen = IdSet().with_ids(*ids[:10_000])
    assert all(i in seen for i in ids[:10_000])
    assert not any(i in seen for i in ids[10_000:])
    numbers = [int.from_bytes(seen.digests[i : i + 8], "little") for i in range(0, 80_000, 8)]
    assert numbers == sorted(numbers) and len(set(numbers)) == 10_000
    assert seen.with_ids(ids[0]) is seen  # nothing new, nothing copied
    round_trip = TypeAdapter(IdSet).validate_json(TypeAdapter(IdSet).dump_json(seen))
    assert round_trip == seen


def test_past_its_allowance_of_ids_a_run_still_takes_cancel() -> None:
    rng = random.Random(3)
    numbers = sorted(rng.getrandbits(64) for _ in range(APPLIED_IDS))
    full = IdSet(digests=b"".join(n.to_bytes(8, "little") for n in numbers))
    state = replace(paused(), steering=replace(paused().steering, seen=full))
    state = steer(state, LiveMessage(text="one more", id="late"))
    assert inbox_texts(state) == [] and "only cancel" in state.diagnostics[-1]
    state = steer(state, CancelRequest(reason="stop", id="c"))
    assert state.steering.cancel_reason == "stop"


# Large text travels as a ref; oversized inline text is refused, not held -----------------------


@pytest.mark.parametrize(
    ("kind", "name"),
    [(t, n) for t in STEERING_TYPES for n in text_fields(t)],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_every_text_field_refuses_a_megabyte_inline(kind: type[SteeringBase], name: str) -> None:
    fields = {
        "Decision": {"request_id": "r", "args_hash": "h", "action": "deny"},
        "Answer": {"request_id": "q"},
        "LiveMessage": {"text": ""},
    }.get(kind.__name__, {})
    item = kind.model_validate({**fields, name: MB, "id": "big"})
    state = paused()
    problem = inputs.check(state, item)  # type: ignore[arg-type]
    assert problem is not None and "blob store" in problem and len(problem) < 400
    after = steer(state, item)
    note = after.diagnostics[-1]
    assert "ignored" in note and "blob store" in note and len(note) <= 500
    assert after.steering == replace(state.steering)  # nothing of it was kept
    assert len(STATE_JSON.dump_json(after)) < 20_000


def test_long_ids_and_malformed_refs_are_refused() -> None:
    state = paused()
    long_id = LiveMessage(text="hi", id="i" * 100_000)
    bad_ref = LiveMessage(text=BlobRef(sha256="../../etc/passwd", size=1), id="r")
    huge_preview = LiveMessage(text=BlobRef(sha256="a" * 64, size=1, preview=MB), id="v")
    for item in (long_id, bad_ref, huge_preview):
        after = steer(state, item)
        assert after.steering.inbox == () and len(after.diagnostics[-1]) <= 500


def test_text_sent_as_refs_is_held_as_refs() -> None:
    message, cancel = ref("a long message " * 500), ref("a long reason " * 500)
    state = steer(paused(), LiveMessage(text=message, id="m"), CancelRequest(reason=cancel))
    assert inbox_texts(state) == [message]
    reason = state.steering.cancel_reason or ""
    assert message.sha256 not in reason and cancel.sha256 in reason and len(reason) < 400
    state = loop.apply(state, Boundary(now=T0))
    assert state.ending is not None and state.ending.reason is TerminalReason.CANCELLED


def _waiting_for_approval() -> RunState:
    state = started(SPEC)
    write = call("write_file", path="a.txt", content="x")
    state = loop.apply(state, ModelReplied(reply=reply("", write)))
    return loop.apply(state, Boundary(now=T0))


def test_a_denial_reason_and_edited_arguments_as_refs() -> None:
    state = _waiting_for_approval()
    request = state.turn.approvals[0]
    reason = ref("not this file, because " * 300)
    denied = steer(
        state,
        Decision(
            request_id=request.request_id,
            args_hash=request.args_hash,
            action="deny",
            reason=reason,
        ),
    )
    (outcome,) = denied.turn.decided
    error = getattr(outcome, "error", "")
    assert reason.sha256 in error and "read_result" in error and len(error) < 500
    record = denied.steering.records[-1]
    assert reason.sha256 in record.reason
    edit = ref('{"path": "b.txt", "content": "' + "y" * 5000 + '"}')
    edited = steer(
        state,
        Decision(
            request_id=request.request_id,
            args_hash=arguments_hash(request.tool, request.arguments),
            action="edit",
            arguments=edit,
        ),
    )
    call_id = request.call_id
    assert edited.turn.approved_args[call_id] == edit
    assert edit.sha256 in edited.turn.edited[call_id] and len(edited.turn.edited[call_id]) < 500


def test_an_answer_as_a_ref_is_the_observation() -> None:
    state = started(SPEC)
    ask = call("ask_user", question="which?")
    state = loop.apply(state, ModelReplied(reply=reply("", ask)))
    state = loop.apply(state, Boundary(now=T0))
    question = state.turn.questions[0]
    answer = ref("this one, " * 1000)
    state = steer(state, Answer(request_id=question.request_id, text=answer))
    (outcome,) = state.turn.decided
    assert getattr(outcome, "output", None) == answer


def test_a_long_inline_reason_is_cut_in_records() -> None:
    record = ApprovalRecord(request_id="r", tool="t", action="deny", reason="n" * 2_000)
    assert len(record.reason) == 500


# The inbox is bounded, and so is the carried state ----------------------------------------------


def test_a_full_inbox_refuses_until_the_model_has_read() -> None:
    state = steer(paused(), *(LiveMessage(text=f"m{i}", id=f"m{i}") for i in range(INBOX_MESSAGES)))
    state = steer(state, LiveMessage(text="one too many", id="late"))
    assert len(state.steering.inbox) == INBOX_MESSAGES
    assert "inbox is full" in state.diagnostics[-1]
    state = loop.apply(steer(state, ResumeRequest()), Boundary(now=T0))
    assert state.steering.inbox == ()  # drained into the next model call
    effect = loop.next_effect(state)
    assert isinstance(effect, CallModel) and len(effect.request.new_messages) == 2 + INBOX_MESSAGES
    state = steer(state, LiveMessage(text="one too many", id="late"))  # sent again: taken
    assert inbox_texts(state) == ["one too many"]


def test_the_carried_state_stays_under_the_payload_limit_at_every_bound() -> None:
    """Every bound filled at once with the largest inputs the bounds allow: the state a
    continue-as-new carries stays well under Temporal's 2 MB payload limit."""
    rng = random.Random(5)
    text = "é" * (limits.INPUT_TEXT_BYTES // 2)  # 2 KiB of UTF-8
    inbox = tuple(
        Message(role="user", content=text, origin="live", source_id="i" * 256)
        for _ in range(INBOX_MESSAGES)
    )
    records = tuple(
        ApprovalRecord(
            request_id="r" * 256,
            tool="write_file",
            action="edit",
            identity="u" * 256,
            args_hash="h" * 64,
            executed_arguments=text,
            reason=text,
        )
        for _ in range(MAX_RECORDS)
    )
    numbers = sorted(rng.getrandbits(64) for _ in range(APPLIED_IDS))
    seen = IdSet(digests=b"".join(n.to_bytes(8, "little") for n in numbers))
    steering = Steering(paused=True, inbox=inbox, records=records, seen=seen)
    state = replace(paused(), steering=steering, diagnostics=("d" * 500,) * MAX_DIAGNOSTICS)
    size = len(AgentInput(spec=SPEC, carried=loop.carry_over(state)).model_dump_json())
    assert size < 1_500_000, size  # measured: 1.12 MB


# A waiting run continues as new before Temporal's limits ----------------------------------------


@pytest.mark.parametrize(
    "gauge",
    [
        HistoryGauge(signals=limits.SIGNALS_BEFORE_CONTINUE),
        HistoryGauge(updates=limits.UPDATES_BEFORE_CONTINUE),
        HistoryGauge(events=limits.EVENTS_BEFORE_CONTINUE),
        HistoryGauge(size_bytes=limits.BYTES_BEFORE_CONTINUE),
        HistoryGauge(events=limits.EVENTS_BEFORE_SUGGESTION, suggested=True),
    ],
)
def test_a_waiting_run_continues_as_new_near_the_limits(gauge: HistoryGauge) -> None:
    for state in (paused(), _waiting_for_approval()):
        assert isinstance(loop.next_effect(state), AwaitInput)
        assert isinstance(loop.next_effect(state, history=gauge), ContinueAsNew)
        assert loop.status(state).waiting_for  # status still says what it waits for


def test_far_from_the_limits_a_waiting_run_waits() -> None:
    quiet = HistoryGauge(events=50, signals=40, suggested=True)  # a fresh execution
    assert isinstance(loop.next_effect(paused(), history=quiet), AwaitInput)


def test_a_thinking_run_near_the_limits_continues_as_new_even_at_segment_start() -> None:
    state = started(SPEC)
    assert state.segment.steps == 0
    crowded = HistoryGauge(signals=limits.SIGNALS_BEFORE_CONTINUE)
    assert isinstance(loop.next_effect(state, history=crowded), ContinueAsNew)
    assert isinstance(loop.next_effect(state, history=HistoryGauge(signals=10)), CallModel)

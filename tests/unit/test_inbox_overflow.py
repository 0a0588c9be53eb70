"""Accepted means delivered (issue 34), the pure part: the loop with the queue's real store
functions, under random floods, pauses and continue-as-new, gives every accepted live message to
the model once and in order, at most `INBOX_MESSAGES` a call, and carries a small state."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from capstan.activities.inbox_queue import spill, take
from capstan.core import loop, overflow
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CallModel,
    ContinueAsNew,
    Finish,
    InboxUnavailable,
    MessagesSpilled,
    MessagesTaken,
    ModelReplied,
    RunTools,
    SpillMessages,
    Steered,
    TakeMessages,
    ToolsFinished,
)
from capstan.core.inbox import InboxQueue, SpillInput
from capstan.core.limits import INBOX_MESSAGES, HistoryGauge
from capstan.core.messages import Message
from capstan.core.spec import GuardPolicy, RunResult, RunSpec, TerminalReason
from capstan.core.state import RunState
from capstan.core.steering import LiveMessage, PauseRequest, ResumeRequest
from capstan.core.tooling import ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from tests.unit.scripted import T0, call, reply, started

STATE_JSON = TypeAdapter(RunState)
PATIENT = GuardPolicy(
    identical_call_nudge=10**6,
    identical_call_abort=10**6,
    similar_nudge=10**6,
    similar_abort=10**6,
    fruitless_nudge=10**6,
    fruitless_abort=10**6,
)
SPEC = RunSpec(task="t", max_steps=5_000, guards=PATIENT)
FULL = HistoryGauge(events=0, size_bytes=0, signals=10**6, updates=0, suggested=True)


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(LocalBlobStore(tmp_path / "blobs"))


def live(i: int) -> LiveMessage:
    return LiveMessage(text=f"m{i}", id=f"m{i}")


def texts(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    return [str(m.content) for m in messages if m.origin == "live"]


@dataclass
class Flood:
    """The loop as the workflow runs it, the queue's store functions as the activities run
    them, and a sender that floods it at random points."""

    store: ContentStore
    rng: random.Random
    total: int
    sent: int = 0
    delivered: list[str] = field(default_factory=list)
    largest_call: int = 0
    largest_carried: int = 0
    continued: int = 0

    def send(self, state: RunState, most: int) -> RunState:
        for _ in range(self.rng.randint(0, most)):
            if self.sent == self.total:
                break
            if overflow.at_bound(state):  # as the workflow: Patch.INBOX_QUEUE granted
                state = overflow.allowing(state)
            state = loop.apply(state, Steered(input=live(self.sent)))
            self.sent += 1
        return state

    def run(self, state: RunState, pause_odds: float = 0.1) -> tuple[RunResult, RunState]:
        for _ in range(100_000):
            state = self.send(state, 150)
            if self.rng.random() < pause_odds:
                paused = not state.steering.paused
                item = PauseRequest() if paused else ResumeRequest()
                state = loop.apply(state, Steered(input=item))
            state = loop.apply(state, Boundary(now=T0))
            history = FULL if self.rng.random() < 0.15 else None
            effect = loop.next_effect(state, history=history)
            match effect:
                case Finish(result=result):
                    return result, state
                case ContinueAsNew():
                    state = loop.carry_over(state)
                    carried = STATE_JSON.dump_json(state)
                    assert len(state.steering.inbox) <= INBOX_MESSAGES
                    self.largest_carried = max(self.largest_carried, len(carried))
                    state = STATE_JSON.validate_json(carried)
                    self.continued += 1
                case AwaitInput():
                    if state.steering.paused:
                        state = loop.apply(state, Steered(input=ResumeRequest()))
                case SpillMessages(request=request):
                    state = self.send(state, 50)  # more arrive while the activity runs
                    queue = spill(self.store, request)
                    state = loop.apply(
                        state, MessagesSpilled(count=len(request.messages), queue=queue)
                    )
                case TakeMessages(request=request):
                    taken = take(self.store, request.queue)
                    outcome = MessagesTaken(messages=taken.messages, queue=taken.queue)
                    state = loop.apply(state, outcome)
                case CallModel(request=request):
                    new = texts(request.new_messages)
                    self.delivered += new
                    self.largest_call = max(self.largest_call, len(new))
                    state = self.send(state, 150)
                    done = self.sent == self.total and state.steering.messages_waiting == 0
                    step = state.step
                    answer = call("finish", answer="done") if done else call("list_dir", f"c{step}")
                    state = loop.apply(state, ModelReplied(reply=reply("", answer, step=step)))
                case RunTools(calls=calls):
                    results = tuple(ToolSucceeded(call_id=c.call_id, output="ok") for c in calls)
                    state = loop.apply(state, ToolsFinished(results=results))
                case _:
                    raise AssertionError(f"unexpected effect {effect!r}")
        raise AssertionError("the run did not end")


@pytest.mark.parametrize("seed", range(12))
def test_every_accepted_message_reaches_the_model_once_in_order(
    store: ContentStore, seed: int
) -> None:
    flood = Flood(store, random.Random(seed), total=3_000)
    result, state = flood.run(started(SPEC))
    assert result.terminal_reason is TerminalReason.COMPLETED, result.error
    assert flood.delivered == [f"m{i}" for i in range(3_000)]
    assert flood.largest_call <= INBOX_MESSAGES
    assert flood.continued > 0 and flood.largest_carried < 1_000_000
    assert state.steering.queue == InboxQueue() and result.unread is None


def test_a_flood_is_kept_in_a_few_spills_and_read_a_chunk_a_call(store: ContentStore) -> None:
    state = overflow.allowing(started(SPEC))
    for i in range(2_000):
        state = loop.apply(state, Steered(input=live(i)))
    assert len(state.steering.inbox) == 2_000 and not state.diagnostics  # none refused
    assert state.status().messages_waiting == 2_000
    spills = 0
    state = loop.apply(state, Boundary(now=T0))
    while isinstance(effect := loop.next_effect(state, history=FULL), SpillMessages):
        spills += 1
        queue = spill(store, effect.request)
        outcome = MessagesSpilled(count=len(effect.request.messages), queue=queue)
        state = loop.apply(state, outcome)
    assert isinstance(effect, ContinueAsNew)
    assert spills == 1  # 1,600 short messages fit one spill (SPILL_BYTES)
    # the drain took the oldest 200 for the next call; the newest 200 stay inline (the carried
    # state holds that many), the 1,600 between went to the store
    assert texts(state.conversation.pending) == [f"m{i}" for i in range(200)]
    assert state.steering.queue.count == 1_600
    assert texts(state.steering.inbox) == [f"m{i}" for i in range(1_800, 2_000)]
    assert state.status().messages_waiting == 1_800


def test_messages_wait_while_a_call_has_its_batch(store: ContentStore) -> None:
    """Kept messages are read one chunk a model call; the inline ones after them."""
    state = overflow.allowing(started(SPEC))
    queue = spill(
        store,
        SpillInput(
            run_id="r",
            messages=tuple(
                Message(role="user", content=f"k{i}", origin="live") for i in range(300)
            ),
            queue=InboxQueue(),
        ),
    )
    state = replace(state, steering=replace(state.steering, queue=queue))
    state = loop.apply(state, Steered(input=live(0)))
    state = loop.apply(state, Boundary(now=T0))
    assert state.steering.inbox != ()  # newer than the kept ones: not drained yet
    effect = loop.next_effect(state)
    assert isinstance(effect, TakeMessages)
    taken = take(store, effect.request.queue)
    state = loop.apply(state, MessagesTaken(messages=taken.messages, queue=taken.queue))
    state = loop.apply(state, Boundary(now=T0))
    effect = loop.next_effect(state)
    assert isinstance(effect, CallModel)  # one chunk a call, even with more kept
    assert texts(effect.request.new_messages) == [f"k{i}" for i in range(200)]
    assert state.steering.queue.count == 100


def test_a_run_that_ends_leaves_its_unread_messages_in_order(store: ContentStore) -> None:
    """A run that stops (its step limit) with messages waiting: the result's tail and the kept
    queue hold every one in order (the tail first), as a thread's next run reads them."""
    spec = SPEC.model_copy(update={"max_steps": 2})
    flood = Flood(store, random.Random(3), total=2_500)
    state = flood.send(started(spec), 0)
    while flood.sent < flood.total:  # all before the first call: most wait when it ends
        state = flood.send(state, 500)
    result, _ = flood.run(state, pause_odds=0.0)
    assert result.terminal_reason is TerminalReason.MAX_STEPS
    assert result.unread is not None
    rest: list[str] = []
    queue = result.unread
    while not queue.empty:
        taken = take(store, queue)
        rest += texts(taken.messages)
        queue = taken.queue
    tail = texts(result.tail)
    unread_inline = [t for t in tail if t not in flood.delivered]
    assert flood.delivered + unread_inline + rest == [f"m{i}" for i in range(flood.sent)]
    # the next run of a thread starts with them kept, read before its own messages
    follow = RunSpec(task="next", thread="t", continues_unread=result.unread)
    assert loop.initial_state(follow, "r2").steering.queue == result.unread


def test_a_store_that_fails_ends_the_run_naming_it(store: ContentStore) -> None:
    state = overflow.allowing(started(SPEC))
    for i in range(2 * INBOX_MESSAGES + 50):
        state = loop.apply(state, Steered(input=live(i)))
    state = loop.apply(state, Boundary(now=T0))  # 200 drained for the next call
    effect = loop.next_effect(state, history=FULL)
    assert isinstance(effect, SpillMessages) and len(effect.request.messages) == 50
    state = loop.apply(state, effect.failed("BlobAccessError", "access denied"))
    state = loop.apply(state, Boundary(now=T0))
    finish = loop.next_effect(state)
    assert isinstance(finish, Finish)  # no second try: the store refused for good
    result = finish.result
    assert result.terminal_reason is TerminalReason.FAILED
    assert result.error == "could not keep live messages in the blob store: access denied"
    # the drained 200 and the newest 200 are in the result; the 50 the store refused are counted
    assert len(texts(result.tail)) == 2 * INBOX_MESSAGES
    assert any("50 live messages were accepted but never read" in d for d in result.diagnostics)


def test_a_failed_spill_at_the_end_is_counted_in_the_result() -> None:
    state = overflow.allowing(started(SPEC))
    for i in range(INBOX_MESSAGES + 30):
        state = loop.apply(state, Steered(input=live(i)))
    state = loop.apply(state, Steered(input=PauseRequest()))
    ended = loop.apply(state, InboxUnavailable(error="could not keep: the store is gone"))
    effect = loop.next_effect(loop.apply(ended, Boundary(now=T0)))
    assert isinstance(effect, Finish)
    assert any(
        "30 live messages were accepted but never read" in d for d in effect.result.diagnostics
    )


def test_the_bound_asks_for_the_patch_once() -> None:
    state = started(SPEC)
    for i in range(INBOX_MESSAGES - 1):
        state = loop.apply(state, Steered(input=live(i)))
    assert not overflow.at_bound(state)
    state = loop.apply(state, Steered(input=live(INBOX_MESSAGES)))
    assert overflow.at_bound(state)  # the next one would be refused by the old rule
    assert not overflow.at_bound(overflow.allowing(state))


def test_take_of_a_queue_with_no_chains_is_empty(store: ContentStore) -> None:
    taken = take(store, InboxQueue(count=5))
    assert taken.messages == () and taken.queue == InboxQueue()


def test_a_retried_spill_writes_the_same_chunks(store: ContentStore) -> None:
    messages = tuple(Message(role="user", content=f"x{i}", origin="live") for i in range(450))
    request = SpillInput(run_id="r", messages=messages, queue=InboxQueue())
    assert spill(store, request) == spill(store, request)  # content-addressed


def test_the_audit_trail_counts_what_was_kept_and_read(store: ContentStore) -> None:
    """From the recorded flood (`tests/histories/inbox_queue*.json`): the trail says how many
    messages went to the store and came back, not the 451 messages again."""
    from temporalio.client import WorkflowHistory

    from capstan.audit.history import decode_history
    from capstan.audit.trail import build_trail

    folder = Path(__file__).parents[1] / "histories"
    paths = [*sorted(folder.glob("inbox_queue.*.json")), folder / "inbox_queue.json"]
    runs = [decode_history(WorkflowHistory.from_json(p.stem, p.read_text())) for p in paths]
    store.store_bytes(b"")  # a store, without the recorded run's blobs: noted as issues
    records, _ = build_trail(runs, store)
    kept = [r for r in records if r["kind"] == "messages_kept"]
    read = [r for r in records if r["kind"] == "messages_read"]
    assert [r["messages"] for r in kept] == [51]  # 450 and the last: 200 sent, 200 carried
    assert [r["messages"] for r in read] == [51] and read[0]["queue"]["count"] == 0
    assert all("request" not in r for r in kept + read)

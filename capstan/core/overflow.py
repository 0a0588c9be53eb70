"""The rules of a run's live messages past its inline inbox (`capstan.core.inbox`). Pure.

- **Accepted means delivered.** Once `spills` is on, a live message is never refused for
  room: the inbox holds any number for as long as the execution lasts (each is a signal or
  update event in its history already).
- **Delivered in order, a bounded batch a model call.** Before each model call the model gets
  at most `INBOX_MESSAGES` live messages: the oldest chunk kept in the blob store while there
  is one (`take_request`), else the oldest held inline (`drain`).
- **Carried small.** Before a continue-as-new the messages held inline past the bound go to
  the blob store, `INBOX_MESSAGES` at a time (`spill_request`); before the run ends, all of
  them do once any are kept there, so a thread's next run reads them in order
  (`RunResult.unread`).
- **A store that fails for good** ends the run `failed` naming it; the messages it could not
  keep are counted in the result's diagnostics, never dropped unsaid.
"""

from __future__ import annotations

from dataclasses import replace

from capstan.core.effects import ContinueAsNew, Effect, Finish, SpillMessages, TakeMessages
from capstan.core.inbox import InboxQueue, SpillInput, TakeInput
from capstan.core.limits import INBOX_MESSAGES
from capstan.core.messages import Message
from capstan.core.state import RunState, Steering

#: what one spill carries at most (messages as JSON), and the estimates it is counted with
SPILL_BYTES = 512 * 1024
REF_BYTES = 512
MESSAGE_OVERHEAD_BYTES = 160

__all__ = [
    "allowing",
    "at_bound",
    "drain",
    "on_failed",
    "on_spilled",
    "on_taken",
    "spill_request",
    "stamped",
    "take_request",
    "unread",
]


def at_bound(state: RunState) -> bool:
    """Whether one more live message takes the run past what the old rule held (and refused):
    the point the workflow asks for `Patch.INBOX_QUEUE` and, if granted, turns `spills` on."""
    return not state.steering.spills and len(state.steering.inbox) >= INBOX_MESSAGES


def allowing(state: RunState) -> RunState:
    """`state` under the rules of this module (`spills` on)."""
    if state.steering.spills:
        return state
    return replace(state, steering=replace(state.steering, spills=True))


def _live_pending(state: RunState) -> int:
    return sum(1 for m in state.conversation.pending if m.origin == "live")


def drain(state: RunState, step: int) -> tuple[RunState, tuple[Message, ...]]:
    """Take the live messages the next model call gets from the inline inbox: all of them under
    the old rule; under this one none while older ones wait in the blob store, else the oldest
    up to `INBOX_MESSAGES` less those the call already has."""
    steering = state.steering
    if not steering.inbox:
        return state, ()
    taken: tuple[Message, ...]
    rest: tuple[Message, ...]
    if not steering.spills:
        taken, rest = steering.inbox, ()
    else:
        room = INBOX_MESSAGES - _live_pending(state)
        if not steering.queue.empty or room <= 0:
            return state, ()
        taken, rest = steering.inbox[:room], steering.inbox[room:]
    drained = tuple(stamped(m, step) for m in taken)
    return replace(state, steering=replace(steering, inbox=rest)), drained


def take_request(state: RunState) -> TakeMessages | None:
    """Read the oldest kept chunk before the next model call, unless the call has live
    messages already (one chunk a call keeps its input small)."""
    queue = state.steering.queue
    if queue.empty or state.steering.spill_error is not None or _live_pending(state):
        return None
    return TakeMessages(request=TakeInput(run_id=state.run_id, queue=queue))


def spill_request(state: RunState, effect: Effect) -> SpillMessages | None:
    """What must go to the blob store before `effect`: before a continue-as-new, the inline
    messages past `INBOX_MESSAGES`; before the end, those and, when some are kept already, all
    the rest (a thread's next run reads the kept ones first). At most `SPILL_BYTES` a call.
    """
    steering = state.steering
    if not steering.spills or steering.spill_error is not None:
        return None
    if isinstance(effect, ContinueAsNew):
        excess = len(steering.inbox) - INBOX_MESSAGES
    elif isinstance(effect, Finish):
        keep = INBOX_MESSAGES if steering.queue.empty else 0
        excess = len(steering.inbox) - keep
    else:
        return None
    if excess <= 0:
        return None
    messages = steering.inbox[: _fitting(steering.inbox[:excess])]
    return SpillMessages(
        request=SpillInput(run_id=state.run_id, messages=messages, queue=steering.queue)
    )


def _fitting(messages: tuple[Message, ...]) -> int:
    """How many of `messages` (at least one) one spill carries: as many as fit in
    `SPILL_BYTES`, so a flood is kept in a few activities, each input far under Temporal's
    2 MB payload limit."""
    total = 0
    for n, message in enumerate(messages):
        content = message.content
        size = len(content.encode("utf-8")) if isinstance(content, str) else REF_BYTES
        total += size + MESSAGE_OVERHEAD_BYTES
        if total > SPILL_BYTES:
            return max(n, 1)
    return len(messages)


def on_spilled(state: RunState, count: int, queue: InboxQueue) -> RunState:
    """The oldest `count` inline messages are in `queue` now (only appends happened since the
    spill was asked for, so they are still the first `count`)."""
    steering = state.steering
    return replace(state, steering=replace(steering, inbox=steering.inbox[count:], queue=queue))


def on_taken(
    state: RunState, messages: tuple[Message, ...], queue: InboxQueue
) -> tuple[RunState, tuple[Message, ...]]:
    """The chunk read: its messages stamped for the next model call, and the queue left."""
    taken = tuple(stamped(m, state.step) for m in messages)
    return replace(state, steering=replace(state.steering, queue=queue)), taken


def on_failed(steering: Steering, error: str) -> Steering:
    """The store failed for good: nothing more is kept or read there."""
    return replace(steering, spill_error=error)


def unread(state: RunState) -> tuple[tuple[Message, ...], InboxQueue | None, str | None]:
    """What a run that ends leaves unread: the inline messages for the result's tail, the kept
    queue, and, when the store failed, a diagnostic counting the messages the tail cannot hold
    (a result is one payload: at most `INBOX_MESSAGES` inline)."""
    steering = state.steering
    queue = None if steering.queue.empty else steering.queue
    inline = steering.inbox
    if len(inline) <= INBOX_MESSAGES:
        return inline, queue, None
    lost = len(inline) - INBOX_MESSAGES
    note = (
        f"{lost:,} live messages were accepted but never read and could not be kept "
        f"({steering.spill_error or 'the blob store failed'})"
    )
    return inline[:INBOX_MESSAGES], queue, note


def stamped(message: Message, step: int) -> Message:
    """A live message as the model gets it: stamped with the step it was drained at."""
    return Message(
        role=message.role,
        content=message.content,
        origin=message.origin,
        source_id=message.source_id,
        step=step,
    )

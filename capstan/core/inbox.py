"""Live messages past what a run holds inline: a durable queue in the blob store.

A run holds at most `INBOX_MESSAGES` waiting live messages in its carried state. A signal the
server accepted is never dropped for want of room (issue 34): past that bound the messages stay
in the execution's memory (they are in its history already, each a signal event) until the run
is about to continue as new or end; then the oldest of them go, `INBOX_MESSAGES` at a time, to
the blob store (`spill_messages`), and the state carries only an `InboxQueue` of constant size.
The model reads the queue first, one chunk a model call (`take_messages`), then the messages
held inline: every message reaches the model once, in the order the run accepted them.

The queue is two chains of immutable, content-addressed chunks, so neither end is ever
rewritten in place:

- `back`: the chunks spilled since the last take, newest first (each names the one before);
- `front`: chunks ready to read, oldest first (each names the next).

A take reads `front`'s first chunk; when `front` is empty it first reverses `back` into a new
`front` chain (once per chunk spilled: every chunk is written twice at most). Pure types only;
the activities are in `capstan.activities.inbox_queue`, the rules in `capstan.core.overflow`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capstan.core.content import BlobRef
from capstan.core.messages import Message

__all__ = ["InboxChunk", "InboxQueue", "SpillInput", "TakeInput", "TakenMessages"]


class InboxQueue(BaseModel):
    """The live messages a run keeps in the blob store, oldest first: `count` of them."""

    model_config = ConfigDict(frozen=True)

    front: BlobRef | None = None
    back: BlobRef | None = None
    count: int = Field(default=0, ge=0)

    @property
    def empty(self) -> bool:
        return self.count == 0


class InboxChunk(BaseModel):
    """One stored chunk: its messages, oldest first, and the next chunk of its chain."""

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...]
    next: BlobRef | None = None


class SpillInput(BaseModel):
    """Append `messages` (the oldest held inline) to the back of `queue`."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    messages: tuple[Message, ...]
    queue: InboxQueue


class TakeInput(BaseModel):
    """Read the oldest chunk of `queue`."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    queue: InboxQueue


class TakenMessages(BaseModel):
    """The oldest chunk's messages and the queue without them."""

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...]
    queue: InboxQueue

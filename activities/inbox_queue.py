"""`spill_messages` and `take_messages`: the blob store side of a run's live-message queue.

The queue's shape and rules are in `capstan.core.inbox` and `capstan.core.overflow`. A chunk is
written once when spilled and at most once more when the `back` chain is reversed into `front`,
so keeping N messages costs O(N) store writes however the spills and takes interleave. Chunks
are content-addressed, so a retried spill writes the same blob and returns the same queue.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.inbox import InboxChunk, InboxQueue, SpillInput, TakeInput, TakenMessages
from capstan.core.limits import INBOX_MESSAGES
from capstan.runtime.blobstore import ContentStore

__all__ = ["InboxActivities", "spill", "take"]


def spill(store: ContentStore, request: SpillInput) -> InboxQueue:
    """`request.messages` as the newest chunks of the queue's `back` chain, `INBOX_MESSAGES` a
    chunk (a take reads one chunk: what one model call gets at most)."""
    queue = request.queue
    back = queue.back
    messages = request.messages
    for start in range(0, len(messages), INBOX_MESSAGES):
        chunk = InboxChunk(messages=messages[start : start + INBOX_MESSAGES], next=back)
        back = _write(store, chunk)
    return InboxQueue(front=queue.front, back=back, count=queue.count + len(messages))


def take(store: ContentStore, queue: InboxQueue) -> TakenMessages:
    """The oldest chunk's messages and the queue without them. A queue whose chains are both
    empty is empty whatever its count says (the loop then stops asking)."""
    front, back = queue.front, queue.back
    if front is None and back is not None:
        front, back = _reversed(store, back), None
    if front is None:
        return TakenMessages(messages=(), queue=InboxQueue())
    chunk = _read(store, front)
    left = queue.count - len(chunk.messages)
    if chunk.next is None and back is None:
        left = 0
    rest = InboxQueue(front=chunk.next, back=back, count=max(left, 0))
    return TakenMessages(messages=chunk.messages, queue=rest)


def _reversed(store: ContentStore, back: BlobRef) -> BlobRef:
    """The `back` chain (newest first) written again as a `front` chain (oldest first)."""
    chunks: list[InboxChunk] = []
    ref: BlobRef | None = back
    while ref is not None:
        chunk = _read(store, ref)
        chunks.append(chunk)
        ref = chunk.next
    after: BlobRef | None = None
    for chunk in chunks:  # newest first: each new chunk names the newer one written before it
        after = _write(store, InboxChunk(messages=chunk.messages, next=after))
    assert after is not None
    return after


def _write(store: ContentStore, chunk: InboxChunk) -> BlobRef:
    return store.store_bytes(chunk.model_dump_json().encode("utf-8"))


def _read(store: ContentStore, ref: BlobRef) -> InboxChunk:
    return InboxChunk.model_validate_json(store.read_bytes(ref.sha256))


class InboxActivities:
    """The two activities over one content store (a thread each: the store's IO blocks)."""

    def __init__(self, content: ContentStore) -> None:
        self.content = content

    @activity.defn(name=ActivityName.SPILL_MESSAGES.value)
    async def spill_messages(self, request: SpillInput) -> InboxQueue:
        return await asyncio.to_thread(spill, self.content, request)

    @activity.defn(name=ActivityName.TAKE_MESSAGES.value)
    async def take_messages(self, request: TakeInput) -> TakenMessages:
        return await asyncio.to_thread(take, self.content, request.queue)

"""The conversation as a hash chain of segments in the blob store.

Each model call appends one segment (the messages since the previous call plus the reply) that
names its parent by hash. Workflow state and activity inputs carry only the head, so each step
costs a constant number of history bytes however long the run. The chain is also tamper-evident:
changing any earlier message changes every later hash.

A compaction writes only what changed: the segments of the old chain it leaves untouched stay
its parents, and the new segments (the compacted part, then the turns kept as they were) follow.
The last of them names, in `compacted_from`, the head it replaces, so a reader that wants the
history as it happened (`original=True`) jumps there. Segments written before structure sharing
(a compacted root with no parent) read the same way.

Segments are content-addressed and immutable, so a decoded segment can be cached by its hash
for as long as it is used (`SegmentCache`): the hash was verified when it was first read.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore

__all__ = [
    "Segment",
    "SegmentCache",
    "StoredSegment",
    "append_segment",
    "load_chain",
    "load_conversation",
    "load_segments",
    "write_compacted",
]


class Segment(BaseModel):
    """Part of a conversation. The last segment a compaction writes names, in
    `compacted_from`, the head of the chain it stands for (with its parents back to the first
    segment the two chains share)."""

    parent: str | None
    step: int
    messages: list[Message]
    compacted_from: str | None = None


@dataclass(frozen=True)
class StoredSegment:
    """A segment with the hash it is stored under."""

    sha256: str
    segment: Segment


class SegmentCache:
    """Decoded segments by hash, least recently used first out, bounded by message count; those
    unused for a while can be given back (`release`).

    Thread-safe: `call_model` and `compact_context` read chains from worker threads.
    """

    def __init__(self, max_messages: int = 20_000, clock: Callable[[], float] = time.monotonic):
        self.max_messages = max_messages
        self._clock = clock
        #: hash -> (segment, when it was last used), least recently used first
        self._segments: OrderedDict[str, tuple[Segment, float]] = OrderedDict()
        self._messages = 0
        self._lock = threading.Lock()

    def get(self, store: ContentStore, sha256: str) -> Segment:
        with self._lock:
            found = self._segments.get(sha256)
            if found is not None:
                self._segments[sha256] = (found[0], self._clock())
                self._segments.move_to_end(sha256)
                return found[0]
        segment = Segment.model_validate_json(store.read_bytes(sha256))
        self.put(sha256, segment)
        return segment

    def put(self, sha256: str, segment: Segment) -> None:
        with self._lock:
            if sha256 in self._segments:
                return
            self._segments[sha256] = (segment, self._clock())
            self._messages += len(segment.messages)
            while self._messages > self.max_messages and len(self._segments) > 1:
                _, (old, _) = self._segments.popitem(last=False)
                self._messages -= len(old.messages)

    def release(self, idle: float) -> bool:
        """Drop the segments unused for `idle` seconds (a parked run's: read again from the
        store if it moves); True when some were dropped."""
        cutoff = self._clock() - idle
        dropped = False
        with self._lock:
            while self._segments:
                sha256, (segment, used) = next(iter(self._segments.items()))
                if used > cutoff:
                    break
                del self._segments[sha256]
                self._messages -= len(segment.messages)
                dropped = True
        return dropped


def _read(store: ContentStore, sha256: str, cache: SegmentCache | None) -> Segment:
    if cache is not None:
        return cache.get(store, sha256)
    return Segment.model_validate_json(store.read_bytes(sha256))


def _write(store: ContentStore, segment: Segment, cache: SegmentCache | None) -> BlobRef:
    dumped = segment.model_dump(mode="json", exclude_defaults=False)
    if dumped["compacted_from"] is None:
        del dumped["compacted_from"]  # segments written before compaction existed hash the same
    data = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    ref = store.store_bytes(data.encode("utf-8"))
    if cache is not None:
        cache.put(ref.sha256, segment)
    return ref


def append_segment(
    store: ContentStore,
    head: BlobRef | None,
    step: int,
    messages: list[Message],
    compacted_from: BlobRef | None = None,
    *,
    cache: SegmentCache | None = None,
) -> BlobRef:
    """Write a segment after `head` and return the new head."""
    segment = Segment(
        parent=head.sha256 if head else None,
        step=step,
        messages=messages,
        compacted_from=compacted_from.sha256 if compacted_from else None,
    )
    return _write(store, segment, cache)


def load_chain(
    store: ContentStore, head: BlobRef | None, cache: SegmentCache | None = None
) -> list[StoredSegment]:
    """The segments the model sees, first to `head`, with their hashes (each verified)."""
    chain: list[StoredSegment] = []
    cursor = head.sha256 if head else None
    while cursor is not None:
        segment = _read(store, cursor, cache)
        chain.append(StoredSegment(cursor, segment))
        cursor = segment.parent
    chain.reverse()
    return chain


def load_segments(
    store: ContentStore,
    head: BlobRef | None,
    *,
    original: bool = False,
    cache: SegmentCache | None = None,
) -> list[Segment]:
    """All segments from the first to `head`, each verified against its hash.

    With `original`, a compaction's segments are replaced by the chain they were compacted
    from: the whole history as it happened (for transcripts and audits) rather than what the
    model sees.
    """
    segments: list[Segment] = []
    cursor = head.sha256 if head else None
    while cursor is not None:
        segment = _read(store, cursor, cache)
        if original and segment.compacted_from is not None:
            cursor = segment.compacted_from
            continue
        segments.append(segment)
        cursor = segment.parent
    segments.reverse()
    return segments


def load_conversation(
    store: ContentStore,
    head: BlobRef | None,
    *,
    original: bool = False,
    cache: SegmentCache | None = None,
) -> list[Message]:
    """Every message of the conversation, oldest first (content may still be refs)."""
    segments = load_segments(store, head, original=original, cache=cache)
    return [m for s in segments for m in s.messages]


def _same(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _shared_prefix(
    chain: Sequence[StoredSegment], messages: Sequence[Message], limit: int
) -> tuple[int, str | None]:
    """How many of `messages` the chain's first segments already hold unchanged (never past
    `limit`), and the hash of the last such segment."""
    pos, parent = 0, None
    for stored in chain:
        held = stored.segment.messages
        end = pos + len(held)
        if end > limit or not _same(held, messages[pos:end]):
            break
        pos, parent = end, stored.sha256
    return pos, parent


def write_compacted(
    store: ContentStore,
    chain: Sequence[StoredSegment],
    messages: Sequence[Message],
    kept_from: int,
    *,
    step: int,
    cache: SegmentCache | None = None,
) -> BlobRef | None:
    """Write the compacted view `messages` of `chain`, sharing its unchanged segments.

    `messages[:kept_from]` is the compacted part (pinned messages, stubs, a summary) and
    `messages[kept_from:]` the turns kept as they were. Returns the new head, or None when the
    view is the chain's own (nothing to write). What is written: one segment with the changed
    part after the last shared segment, and one with the kept turns, which names the old head.
    """
    if not chain or _same([m for s in chain for m in s.segment.messages], messages):
        return None
    pos, parent = _shared_prefix(chain, messages, kept_from)
    changed, kept = list(messages[pos:kept_from]), list(messages[kept_from:])
    if changed and kept:
        parent = _write(store, Segment(parent=parent, step=step, messages=changed), cache).sha256
        changed = []
    last = Segment(
        parent=parent, step=step, messages=changed + kept, compacted_from=chain[-1].sha256
    )
    return _write(store, last, cache)

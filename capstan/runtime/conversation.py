"""The conversation as a hash chain of segments in the blob store.

Each model call appends one segment (the messages since the previous call plus the reply) that
names its parent by hash. Workflow state and activity inputs carry only the head, so each step
costs a constant number of history bytes however long the run. The chain is also tamper-evident:
changing any earlier message changes every later hash.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore

__all__ = ["Segment", "append_segment", "load_conversation", "load_segments"]


class Segment(BaseModel):
    """Part of a conversation. A compaction writes a root segment (no parent) holding the
    compacted view and naming, in `compacted_from`, the head of the original chain."""

    parent: str | None
    step: int
    messages: list[Message]
    compacted_from: str | None = None


def append_segment(
    store: ContentStore,
    head: BlobRef | None,
    step: int,
    messages: list[Message],
    compacted_from: BlobRef | None = None,
) -> BlobRef:
    """Write a segment after `head` and return the new head."""
    segment = Segment(
        parent=head.sha256 if head else None,
        step=step,
        messages=messages,
        compacted_from=compacted_from.sha256 if compacted_from else None,
    )
    dumped = segment.model_dump(mode="json", exclude_defaults=False)
    if dumped["compacted_from"] is None:
        del dumped["compacted_from"]  # segments written before compaction existed hash the same
    data = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return store.store_bytes(data.encode("utf-8"))


def load_segments(
    store: ContentStore, head: BlobRef | None, *, original: bool = False
) -> list[Segment]:
    """All segments from the first to `head`, each verified against its hash.

    With `original`, a compacted root is replaced by the chain it was compacted from: the
    whole history as it happened (for transcripts and audits) rather than what the model sees.
    """
    segments: list[Segment] = []
    cursor = head.sha256 if head else None
    while cursor is not None:
        segment = Segment.model_validate_json(store.read_bytes(cursor))
        if original and segment.compacted_from is not None:
            cursor = segment.compacted_from
            continue
        segments.append(segment)
        cursor = segment.parent
    segments.reverse()
    return segments


def load_conversation(
    store: ContentStore, head: BlobRef | None, *, original: bool = False
) -> list[Message]:
    """Every message of the conversation, oldest first (content may still be refs)."""
    return [m for s in load_segments(store, head, original=original) for m in s.messages]

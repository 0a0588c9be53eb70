"""When an activity's blocking IO runs on the event loop instead of in a thread.

A thread hop (`asyncio.to_thread`) hands the GIL from the event loop to a pool thread and back
and wakes the loop through its self-pipe: with many runs active on a worker, each hop costs
context switches that cost more than reading or writing a small local file (the figures are
in `bench/README.md`, issue 28, fourth pass). So the workspace tools and the model call do small
work in place and hop to a thread only for large work, or for a store that may be across a
network (`BlobStore.on_local_disk`).

Within the bounds, what runs in place is a few local file operations and, for the model call,
rendering and counting the tokens of at most `INLINE_BYTES` of text: a few milliseconds at
most on a busy machine. A workspace or a blob directory on a network filesystem that stalls
would stall the event loop too; name such a blob directory in `CAPSTAN_BLOB_URL`, which keeps
the store's calls in threads.
"""

from __future__ import annotations

from collections.abc import Iterable

from capstan.core.messages import Message

__all__ = ["INLINE_BYTES", "INLINE_ENTRIES", "small_messages"]

#: a file of at most this many bytes is read or written in place, and messages whose text
#: UTF-8 keeps within it are rendered and stored in place
INLINE_BYTES = 64 * 1024
#: a directory of at most this many entries is listed in place (one `stat` each)
INLINE_ENTRIES = 256


def small_messages(messages: Iterable[Message], chars: int = 0) -> bool:
    """Whether `messages` (and `chars` more characters) are small enough to render, count and
    store in place: all their text inline (a ref may be large: reading it is not small) and
    together within `INLINE_BYTES` however UTF-8 encodes it (at most 4 bytes a character)."""
    for message in messages:
        texts = [
            message.content,
            message.reasoning or "",
            message.reasoning_signature or "",
            *(c.arguments for c in message.tool_calls),
        ]
        for text in texts:
            if not isinstance(text, str):
                return False
            chars += len(text)
    return chars * 4 <= INLINE_BYTES

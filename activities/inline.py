"""When an activity's blocking IO runs on the event loop instead of in a thread.

A thread hop (`asyncio.to_thread`) hands the GIL from the event loop to a pool thread and back,
and wakes the loop through its self-pipe: with 100 runs active on one worker it cost about 20
context switches a hop. A ReAct iteration of the active-runs bench (one model call, three
`list_dir` calls) took 165 voluntary context switches in Capstan's worker against the SDK
floor's 90, and 95 once its five hops were gone (`bench/README.md`, issue 28). Reading or
writing a small local file costs less than that, so the workspace tools and the model call do
small work in place and hop to a thread only for large work, or for a store across a network.

The bounds keep what the event loop does in place to well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Iterable

from capstan.core.messages import Message

__all__ = ["INLINE_BYTES", "INLINE_ENTRIES", "small_messages"]

#: a file of at most this many bytes (or text of at most a quarter as many characters, which
#: UTF-8 keeps within it) is read or written in place
INLINE_BYTES = 64 * 1024
#: a directory of at most this many entries is listed in place (one `stat` each)
INLINE_ENTRIES = 256


def small_messages(messages: Iterable[Message], chars: int = 0) -> bool:
    """Whether `messages` (and `chars` more characters) are small enough to render, count and
    store in place: all their text inline (a ref may be large: reading it is not small) and
    together within `INLINE_BYTES`."""
    for message in messages:
        texts = [
            message.content,
            message.reasoning or "",
            *(c.arguments for c in message.tool_calls),
        ]
        for text in texts:
            if not isinstance(text, str):
                return False
            chars += len(text)
    return chars * 4 <= INLINE_BYTES

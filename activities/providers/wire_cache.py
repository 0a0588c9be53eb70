"""Each rendered message's wire JSON, encoded once per worker, and request bodies spliced from it.

A model call sends the whole conversation, but all of it except the last step was sent, in the
same bytes, by the call before: the rendered messages are cached by conversation head
(`rendering.RenderCache`), so the same `RenderedMessage` objects come back call after call.
Encoding them once and joining the cached fragments turns the O(conversation) part of building
a request body from thousands of dicts and a full `json.dumps` (~5 ms at step 300, all on the
event loop, and garbage the collector then walks) into one bytes join.

Entries are keyed by everything a message says (its fields), so equal messages share one
fragment: the same system prompt in a thousand parked runs is held once, and a worker whose
rendering cache was dropped finds its fragments again. Nothing here holds run state, and a miss
costs time, never correctness.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from capstan.activities.providers.base import RenderedMessage

__all__ = ["WireCache", "dumps", "splice_body", "wire_cache"]


def dumps(value: Any) -> bytes:
    """JSON as httpx encodes a `json=` body: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _key(fmt: str, m: RenderedMessage) -> Hashable:
    """A message's every field (a str caches its hash, so a message seen before hashes fast)."""
    return (
        fmt,
        m.role,
        m.content,
        m.tool_calls,
        m.tool_call_id,
        m.name,
        m.is_error,
        m.reasoning,
        m.reasoning_signature,
        tuple(sorted(m.extra.items())),
    )


#: a message, its key, its fragment, and when it was last used
_Seen = tuple[RenderedMessage, Hashable, bytes, float]


@dataclass
class _Shared:
    fragment: bytes
    users: int = 0  # entries of `WireCache._seen` that name it


class WireCache:
    """Encoded fragments by (wire format, message), least recently used first out, bounded by
    the bytes of the distinct fragments and by the messages that name them; those unused for a
    while can be given back (`release`). Thread-safe.

    A message seen before is found by identity (the rendering cache hands back the same
    objects call after call: one dict lookup per message); a new one by its fields, so an equal
    message (another run's system prompt) shares the fragment encoded first."""

    def __init__(
        self,
        max_bytes: int = 16 * 1024 * 1024,
        max_messages: int = 200_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes, self.max_messages = max_bytes, max_messages
        self._clock = clock
        #: (format, id(message)) -> (message, its key, its fragment, when it was last used); the
        #: entry keeps the message alive, so its id is not reused while the entry is here
        self._seen: OrderedDict[tuple[str, int], _Seen] = OrderedDict()
        self._shared: dict[Hashable, _Shared] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def encoded(
        self, fmt: str, message: RenderedMessage, encode: Callable[[RenderedMessage], bytes]
    ) -> bytes:
        """`encode(message)`, from the cache when an equal message was encoded before."""
        ident = (fmt, id(message))
        with self._lock:
            seen = self._seen.get(ident)
            if seen is not None and seen[0] is message:
                self._seen[ident] = (*seen[:3], self._clock())
                self._seen.move_to_end(ident)
                return seen[2]
        key = _key(fmt, message)
        with self._lock:
            shared = self._shared.get(key)
        fragment = shared.fragment if shared is not None else encode(message)
        with self._lock:
            self._forget(ident)
            shared = self._shared.setdefault(key, _Shared(fragment))
            self._bytes += len(fragment) if shared.users == 0 else 0
            shared.users += 1
            self._seen[ident] = (message, key, shared.fragment, self._clock())
            while len(self._seen) > 1 and (
                self._bytes > self.max_bytes or len(self._seen) > self.max_messages
            ):
                self._forget(next(iter(self._seen)))
            return shared.fragment

    def _forget(self, ident: tuple[str, int]) -> None:
        seen = self._seen.pop(ident, None)
        if seen is None:
            return
        shared = self._shared[seen[1]]
        shared.users -= 1
        if shared.users == 0:
            del self._shared[seen[1]]
            self._bytes -= len(shared.fragment)

    def release(self, idle: float) -> bool:
        """Forget the messages unused for `idle` seconds (a parked run's: encoded again if it
        moves), and the fragments only they named; True when some were forgotten."""
        cutoff = self._clock() - idle
        dropped = False
        with self._lock:
            while self._seen:
                ident, seen = next(iter(self._seen.items()))
                if seen[3] > cutoff:
                    break
                self._forget(ident)
                dropped = True
        return dropped

    def __len__(self) -> int:
        """Distinct fragments held."""
        return len(self._shared)


#: One per worker process: adapters are built per call, the messages outlive them.
wire_cache = WireCache()


def splice_body(fields: dict[str, Any], key: str, items: Sequence[bytes]) -> bytes:
    """The JSON object `fields` plus `key`: a list whose items are already encoded."""
    rest = dumps(fields)  # b"{...}": spliced after the list, so `key` comes first
    tail = b"}" if rest == b"{}" else b"," + rest[1:]
    return b"{" + dumps(key) + b":[" + b",".join(items) + b"]" + tail

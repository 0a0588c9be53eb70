"""Provider-neutral messages -> `RenderedMessage`s: refs resolved, observations budgeted,
untrusted output fenced, reviewer notes attached. Shared by every provider adapter.

Rendering is incremental: a conversation head names an immutable list of messages, so its
rendering (under one result budget) is cached by head, and each model call renders only the
segments since the last cached head (`render_view`). Nothing here holds run state: a cache miss
costs time, never correctness.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capstan.activities.fence import FENCE_TAG, fence_untrusted
from capstan.activities.providers.base import RenderedCall, RenderedMessage
from capstan.activities.result_budget import ResultBudget, apply_budget
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import BlobError, ContentStore
from capstan.runtime.conversation import Segment, SegmentCache

__all__ = ["FENCE_TAG", "RenderCache", "RenderedView", "fence_untrusted", "render", "render_view"]

TokenCounter = Callable[[str], int]


def render(
    content: ContentStore, history: Sequence[Message], budget: ResultBudget
) -> list[RenderedMessage]:
    out: list[RenderedMessage] = []
    for m in history:
        if m.role == "user" and isinstance(m.content, BlobRef):
            text = _long_message(content, m.content, budget)
        else:
            text = content.resolve(m.content)
        if m.role == "tool":
            ref = m.content.sha256 if isinstance(m.content, BlobRef) else None
            text = apply_budget(text, ref, budget)
            if m.untrusted:
                text = fence_untrusted(text, m.name or "tool", m.tool_call_id or "")
            if m.note:
                text = f"[{m.note}]\n{text}"
        calls = tuple(
            RenderedCall(id=c.id, name=c.name, arguments=content.resolve(c.arguments))
            for c in m.tool_calls
        )
        out.append(
            RenderedMessage(
                role=m.role,
                content=text,
                tool_calls=calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
                is_error=m.role == "tool" and text.startswith("Error ("),
                reasoning=content.resolve(m.reasoning) if m.reasoning is not None else None,
                reasoning_signature=m.reasoning_signature,
            )
        )
    return out


def _long_message(content: ContentStore, ref: BlobRef, budget: ResultBudget) -> str:
    """A long message from a person (it arrived as a ref): a page of it, and how to read the
    rest, like a long tool result. A ref the store cannot serve (a client that wrote to another
    store) is said so in the message rather than failing the model call."""
    try:
        text = content.resolve(ref)
    except (BlobError, UnicodeDecodeError) as exc:
        return (
            f"{ref.preview}\n[the rest of this message ({ref.size:,} bytes, ref {ref.sha256!r}) "
            f"could not be read from the blob store: {type(exc).__name__}]"
        )
    return apply_budget(text, ref.sha256, budget)


@dataclass(frozen=True)
class RenderedView:
    """A rendered conversation and its token estimate (each message's tokens + 4)."""

    messages: tuple[RenderedMessage, ...] = ()
    tokens: int = 0
    chars: int = 0

    def extend(self, more: Sequence[RenderedMessage], count_tokens: TokenCounter) -> RenderedView:
        return RenderedView(
            messages=self.messages + tuple(more),
            tokens=self.tokens + sum(count_tokens(m.content) + 4 for m in more),
            chars=self.chars + sum(len(m.content) for m in more),
        )


class RenderCache:
    """Rendered conversations by (head, budget), least recently used first out; those unused
    for a while can be given back (`release`).

    A head names one immutable list of messages, so its rendering under one budget never
    changes: `call_model` renders only what a step added. Bounded by the characters the cached
    views hold (counted per view, so a prefix two views share counts twice: the bound errs on
    the small side). Thread-safe.
    """

    def __init__(self, max_chars: int = 16_000_000, clock: Callable[[], float] = time.monotonic):
        self.max_chars = max_chars
        self._clock = clock
        #: (head, budget) -> (view, when it was last used), least recently used first
        self._views: OrderedDict[tuple[str, ResultBudget], tuple[RenderedView, float]] = (
            OrderedDict()
        )
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, head: str, budget: ResultBudget) -> RenderedView | None:
        with self._lock:
            found = self._views.get((head, budget))
            if found is None:
                return None
            self._views[(head, budget)] = (found[0], self._clock())
            self._views.move_to_end((head, budget))
            return found[0]

    def put(self, head: str, budget: ResultBudget, view: RenderedView) -> None:
        with self._lock:
            old = self._views.pop((head, budget), None)
            self._chars += view.chars - (old[0].chars if old else 0)
            self._views[(head, budget)] = (view, self._clock())
            while self._chars > self.max_chars and len(self._views) > 1:
                _, (dropped, _) = self._views.popitem(last=False)
                self._chars -= dropped.chars

    def release(self, idle: float) -> bool:
        """Drop the views unused for `idle` seconds (a parked run's: rendered again if it
        moves); True when some were dropped."""
        cutoff = self._clock() - idle
        dropped = False
        with self._lock:
            while self._views:
                key, (view, used) = next(iter(self._views.items()))
                if used > cutoff:
                    break
                del self._views[key]
                self._chars -= view.chars
                dropped = True
        return dropped


def render_view(
    content: ContentStore,
    head: BlobRef | None,
    budget: ResultBudget,
    *,
    segments: SegmentCache,
    cache: RenderCache,
    count_tokens: TokenCounter,
) -> RenderedView:
    """The rendered conversation up to `head`: from the cache, else the longest cached prefix
    of its chain plus the segments after it (read through `segments`)."""
    pending: list[Segment] = []
    cursor = head.sha256 if head else None
    view = RenderedView()
    while cursor is not None:
        cached = cache.get(cursor, budget)
        if cached is not None:
            view = cached
            break
        segment = segments.get(content, cursor)
        pending.append(segment)
        cursor = segment.parent
    if not pending:
        return view
    for segment in reversed(pending):
        view = view.extend(render(content, segment.messages, budget), count_tokens)
    assert head is not None
    cache.put(head.sha256, budget, view)
    return view

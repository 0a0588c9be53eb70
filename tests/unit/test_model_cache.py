"""`call_model` renders incrementally: cached by head, the same as rendering everything."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from capstan.activities.model import ModelActivities
from capstan.activities.rendering import RenderCache, RenderedView, render, render_view
from capstan.activities.result_budget import ResultBudget
from capstan.core.activity_io import CallModelInput
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import BlobNotFoundError, ContentStore, LocalBlobStore
from capstan.runtime.conversation import (
    Segment,
    SegmentCache,
    append_segment,
    load_conversation,
)

BUDGET = ResultBudget(max_chars=1000)


def tokens(text: str) -> int:
    return len(text)


class CountingStore(ContentStore):
    """Counts reads that reach the blob store (a cache miss above it)."""

    reads = 0

    def read_bytes(self, sha256: str) -> bytes:
        self.reads += 1
        return super().read_bytes(sha256)


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(LocalBlobStore(tmp_path / "blobs"), cache_entries=0)


def _chain(store: ContentStore, steps: int) -> BlobRef:
    head = append_segment(store, None, 0, [Message(role="user", content="task")])
    for step in range(1, steps + 1):
        reply = Message(role="assistant", content=f"thought {step}", origin="model", step=step)
        output = store.store_text("y" * 5000 + str(step))  # a ref, cut by the budget
        result = Message(role="tool", content=output, tool_call_id=f"c{step}", name="t")
        head = append_segment(store, head, step, [reply, result])
    return head


def test_a_view_equals_rendering_the_whole_conversation(store: CountingStore) -> None:
    head = _chain(store, 5)
    cache, segments = RenderCache(), SegmentCache()
    view = render_view(store, head, BUDGET, segments=segments, cache=cache, count_tokens=tokens)
    whole = render(store, load_conversation(store, head), BUDGET)
    assert list(view.messages) == whole
    assert view.tokens == sum(len(m.content) + 4 for m in whole)
    assert cache.get(head.sha256, BUDGET) == view
    assert cache.get(head.sha256, ResultBudget(max_chars=500)) is None  # per budget


def test_only_the_segments_after_a_cached_head_are_read(store: CountingStore) -> None:
    head = _chain(store, 5)
    cache, segments = RenderCache(), SegmentCache()
    render_view(store, head, BUDGET, segments=segments, cache=cache, count_tokens=tokens)
    longer = append_segment(store, head, 6, [Message(role="assistant", content="six", step=6)])
    store.reads = 0
    view = render_view(
        store, longer, BUDGET, segments=SegmentCache(), cache=cache, count_tokens=tokens
    )
    assert store.reads == 1  # the new segment; everything before came from the cache
    assert view.messages[-1].content == "six"


def test_caches_are_bounded() -> None:
    cache = RenderCache(max_chars=100)
    view = RenderedView(chars=60)
    cache.put("a" * 64, BUDGET, view)
    cache.put("b" * 64, BUDGET, view)
    assert cache.get("a" * 64, BUDGET) is None and cache.get("b" * 64, BUDGET) == view
    segments = SegmentCache(max_messages=3)
    store = ContentStore(LocalBlobStore(Path("/nonexistent")), cache_entries=0)
    two = Segment(parent=None, step=0, messages=[Message(role="user")] * 2)
    segments.put("1" * 64, two)
    segments.put("2" * 64, two)
    assert segments.get(store, "2" * 64) is two
    with pytest.raises(BlobNotFoundError):  # evicted, and the store has no such blob
        segments.get(store, "1" * 64)


def test_what_went_unused_is_released() -> None:
    """A run parked for a person leaves its view and segment here until the worker is idle."""
    now = [0.0]
    cache, segments = RenderCache(clock=lambda: now[0]), SegmentCache(clock=lambda: now[0])
    store = ContentStore(LocalBlobStore(Path("/nonexistent")), cache_entries=0)
    one = Segment(parent=None, step=0, messages=[Message(role="user")])
    for head in ("a" * 64, "b" * 64):
        cache.put(head, BUDGET, RenderedView(chars=1))
        segments.put(head, one)
        now[0] += 10
    assert cache.get("a" * 64, BUDGET) is not None  # used again at 20: newer than "b"
    assert segments.get(store, "a" * 64) is one
    now[0] = 25
    assert not cache.release(60) and not segments.release(60)
    assert cache.release(10) and segments.release(10)  # "b", last used at 10
    assert cache.get("b" * 64, BUDGET) is None and cache.get("a" * 64, BUDGET) is not None
    assert segments.get(store, "a" * 64) is one
    with pytest.raises(BlobNotFoundError):  # released, and the store has no such blob
        segments.get(store, "b" * 64)
    now[0] = 100
    assert cache.release(10) and cache.get("a" * 64, BUDGET) is None


def _reply(request: httpx.Request) -> httpx.Response:
    count = len(json.loads(request.content)["messages"])
    message = {"role": "assistant", "content": f"seen {count}"}
    body = {"choices": [{"message": message, "finish_reason": "stop"}]}
    return httpx.Response(200, json={**body, "usage": {"prompt_tokens": 5, "completion_tokens": 1}})


@pytest.fixture
async def models(store: CountingStore) -> AsyncIterator[ModelActivities]:
    env = {"CAPSTAN_MODEL": "openai:m", "OPENAI_BASE_URL": "http://m/v1", "CAPSTAN_STREAM": "0"}
    async with httpx.AsyncClient(transport=httpx.MockTransport(_reply)) as http:
        yield ModelActivities(store, env, http)


async def test_each_call_primes_the_next(models: ModelActivities, store: CountingStore) -> None:
    tools = store.store_bytes(b"[]")
    head: BlobRef | None = None
    new = (Message(role="user", content="task"),)
    for step in range(1, 6):
        request = CallModelInput(
            run_id="r", step=step, profile="default", conversation=head, new_messages=new,
            tools=tools,
        )  # fmt: skip
        store.reads = 0
        reply = await models.call_model(request)
        if step > 1:
            assert store.reads == 0  # the conversation came from the cache the last call primed
        assert reply.message.content == f"seen {2 * step - 1}"
        head = reply.conversation
        new = (Message(role="user", content=f"more {step}"),)
    assert head is not None
    full = load_conversation(store, head)
    assert [m.content for m in full[-2:]] == ["more 4", "seen 9"]
    cold = ModelActivities(store, models.env, models.http)  # a restarted worker
    request = request.model_copy(update={"step": 6, "conversation": head, "new_messages": new})
    prompt = cold._prepare(request, *cold._limits(request))
    assert [m.content for m in prompt.view.messages][-2:] == ["seen 9", "more 5"]


async def test_a_call_after_an_idle_release_reads_its_conversation_again(
    models: ModelActivities, store: CountingStore
) -> None:
    tools = store.store_bytes(b"[]")
    request = CallModelInput(
        run_id="r", step=1, profile="default", conversation=None,
        new_messages=(Message(role="user", content="task"),), tools=tools,
    )  # fmt: skip
    first = await models.call_model(request)
    assert models.release_idle(0) and not models.release_idle(0)  # all of it, once
    more = (Message(role="user", content="more"),)
    request = request.model_copy(
        update={"step": 2, "conversation": first.conversation, "new_messages": more}
    )
    store.reads = 0
    reply = await models.call_model(request)
    assert store.reads > 0  # read from the store, not the released caches
    assert reply.message.content == "seen 3"

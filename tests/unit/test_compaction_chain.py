"""A compaction writes what changed: shared segments, the history as it happened, no copies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from capstan.activities.compaction import CompactionActivities
from capstan.activities.model import ModelActivities
from capstan.core.activity_io import CompactInput, CompactionStrategy
from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.conversation import append_segment, load_chain, load_conversation

OUTPUT = "x" * 500  # large enough to prune, small enough to stay inline


def _summary(request: httpx.Request) -> httpx.Response:
    text = json.loads(request.content)["messages"][-1]["content"]
    reply = {"role": "assistant", "content": f"summary of {len(text)} chars"}
    return httpx.Response(200, json={"choices": [{"message": reply, "finish_reason": "stop"}]})


@pytest.fixture
async def compaction(tmp_path: Path) -> AsyncIterator[CompactionActivities]:
    content = ContentStore(LocalBlobStore(tmp_path / "blobs"))
    env = {"CAPSTAN_MODEL": "openai:m", "OPENAI_BASE_URL": "http://m/v1", "CAPSTAN_STREAM": "0"}
    async with httpx.AsyncClient(transport=httpx.MockTransport(_summary)) as http:
        models = ModelActivities(content, env, http)
        yield CompactionActivities(content, models, http, lambda s: (len(s) + 3) // 4)


def _step(step: int) -> list[Message]:
    """What call_model appends at `step`: the last step's tool result, then the reply."""
    call = ToolCall(id=f"c{step}", name="list_dir", arguments="{}")
    reply = Message(role="assistant", content="", tool_calls=(call,), origin="model", step=step)
    if step == 1:
        return [
            Message(role="system", content="sys", origin="system"),
            Message(role="user", content="task"),
            reply,
        ]
    result = Message(
        role="tool", content=f"{step - 1}{OUTPUT}", tool_call_id=f"c{step - 1}", name="list_dir",
        origin="tool", step=step - 1,
    )  # fmt: skip
    return [result, reply]


def _grow(store: ContentStore, head: BlobRef | None, first: int, last: int) -> BlobRef | None:
    for step in range(first, last + 1):
        head = append_segment(store, head, step, _step(step))
    return head


def _request(head: BlobRef, strategy: CompactionStrategy, step: int) -> CompactInput:
    return CompactInput(
        run_id="r", step=step, profile="default", conversation=head, strategy=strategy,
        keep_turns=2,
    )  # fmt: skip


def _blob_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def test_prune_writes_the_stubbed_part_and_the_kept_turns_only(
    compaction: CompactionActivities, tmp_path: Path
) -> None:
    store = compaction.content
    head = _grow(store, None, 1, 30)
    assert head is not None
    original = load_conversation(store, head)
    first = await compaction.compact_context(_request(head, "prune", 30))
    assert first.conversation is not None and first.tokens_after < first.tokens_before
    view = load_conversation(store, first.conversation)
    assert len(view) == len(original)
    assert [m.content for m in view[-3:]] == [m.content for m in original[-3:]]  # kept as is
    assert all("pruned" in str(m.content) for m in view[:-4] if m.role == "tool")
    assert load_conversation(store, first.conversation, original=True) == original

    # 20 more steps, then a second prune: it shares the first one's stubbed segment
    later = _grow(store, first.conversation, 31, 50)
    assert later is not None
    before = _blob_bytes(tmp_path / "blobs")
    second = await compaction.compact_context(_request(later, "prune", 50))
    assert second.conversation is not None
    written = _blob_bytes(tmp_path / "blobs") - before
    chain = load_chain(store, second.conversation)
    stubbed_once = load_chain(store, first.conversation)[-2].sha256
    assert stubbed_once in [s.sha256 for s in chain]
    full = sum(len(s.segment.model_dump_json()) for s in load_chain(store, later))
    assert written < full / 2  # a copy of the conversation would be `full`
    history = load_conversation(store, second.conversation, original=True)
    assert history == load_conversation(store, later, original=True)
    assert len(history) == 2 + 2 * 50 - 1


async def test_a_prune_with_nothing_to_prune_writes_nothing(
    compaction: CompactionActivities,
) -> None:
    head = _grow(compaction.content, None, 1, 30)
    assert head is not None
    first = await compaction.compact_context(_request(head, "prune", 30))
    assert first.conversation is not None
    again = await compaction.compact_context(_request(first.conversation, "prune", 30))
    assert again.conversation is None and again.tokens_after == again.tokens_before
    assert again.pruned == 0


async def test_a_new_summary_replaces_the_earlier_one(compaction: CompactionActivities) -> None:
    store = compaction.content
    head = _grow(store, None, 1, 10)
    assert head is not None
    first = await compaction.compact_context(_request(head, "summarize", 10))
    assert first.conversation is not None
    later = _grow(store, first.conversation, 11, 20)
    assert later is not None
    second = await compaction.compact_context(_request(later, "summarize", 20))
    assert second.conversation is not None
    view = load_conversation(store, second.conversation)
    summaries = [m for m in view if m.origin == "nudge"]
    assert len(summaries) == 1 and summaries[0].step == 20
    assert [m.content for m in view[:2]] == ["sys", "task"]
    assert len(load_conversation(store, second.conversation, original=True)) == 2 + 2 * 20 - 1

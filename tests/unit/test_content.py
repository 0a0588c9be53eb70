"""The blob store, the conversation chain and message rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.activities.rendering import render
from capstan.activities.result_budget import ResultBudget
from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall
from capstan.runtime.blobstore import (
    BlobIntegrityError,
    BlobNotFoundError,
    ContentStore,
    LocalBlobStore,
)
from capstan.runtime.conversation import append_segment, load_conversation


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(LocalBlobStore(tmp_path / "blobs"), cache_entries=0)


def test_small_text_inline_large_text_ref(store: ContentStore) -> None:
    assert store.store_text("small") == "small"
    ref = store.store_text("é" * 5000)
    assert isinstance(ref, BlobRef) and ref.size == 10000 and ref.preview.startswith("ééé")
    assert store.resolve(ref) == "é" * 5000
    assert store.store_text("é" * 5000) == ref  # content-addressed: idempotent


def test_a_structured_blob_is_stored_without_preview_or_count(store: ContentStore) -> None:
    """A conversation segment's ref names its blob and size only: its JSON prefix told a
    reader nothing and rode in every model call's input and reply."""
    head = append_segment(store, None, 0, [Message(role="user", content="task " * 100)])
    assert head.preview == "" and head.tokens == 0 and head.size > 500
    assert load_conversation(store, head)[0].content == "task " * 100
    text = store.store_text("word " * 1000)
    assert isinstance(text, BlobRef) and text.preview.startswith("word word") and text.tokens


@pytest.mark.parametrize("char", ["x", "é", "€", "😀"])
def test_fits_inline_is_exactly_what_store_text_keeps_inline(
    store: ContentStore, char: str
) -> None:
    width = len(char.encode("utf-8"))
    edge = store.inline_limit // width
    for count in (0, edge - 1, edge, edge + 1, 4 * edge):
        text = char * count
        assert store.fits_inline(text) == (store.store_text(text) == text), (char, count)
        assert store.fits_inline(text) == (len(text.encode()) <= store.inline_limit)


def test_altered_and_missing_blobs_are_errors(store: ContentStore, tmp_path: Path) -> None:
    ref = store.store_text("x" * 4000)
    assert isinstance(ref, BlobRef)
    path = tmp_path / "blobs" / ref.sha256[:2] / ref.sha256[2:]
    path.write_text("y" * 4000)
    with pytest.raises(BlobIntegrityError):
        store.resolve(ref)
    path.unlink()
    with pytest.raises(BlobNotFoundError):
        store.resolve(ref)
    with pytest.raises(BlobNotFoundError):
        store.read_bytes("../../etc/passwd")


def test_conversation_chain_round_trips(store: ContentStore) -> None:
    first = [Message(role="user", content="hi")]
    head1 = append_segment(store, None, 1, first)
    second = [Message(role="assistant", content="hello", origin="model", step=2)]
    head2 = append_segment(store, head1, 2, second)
    assert load_conversation(store, head2) == first + second
    assert load_conversation(store, None) == []


def test_render_messages_resolves_and_cuts_observations(store: ContentStore) -> None:
    big = store.store_text("z" * 5000)
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "a"}')
    history = [
        Message(role="user", content="task"),
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content=big, tool_call_id="c1", name="read_file"),
    ]
    wire = render(store, history, ResultBudget(max_chars=1000))
    assert wire[1].content == "" and wire[1].tool_calls[0].name == "read_file"
    assert wire[2].content.startswith("z" * 1000)
    assert isinstance(big, BlobRef)
    assert f"read_result(ref={big.sha256!r}, offset=1000)" in wire[2].content

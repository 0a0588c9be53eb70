"""Request bodies spliced from cached per-message JSON (`wire_cache`) say exactly what the
plain `body()` says, for both adapters and every message shape; the cache encodes equal
messages once, tells different ones apart, and stays within its bound. Also the blob store's
fan-out directories: made once, made again when the store was wiped."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from capstan.activities.providers.anthropic import AnthropicMessages
from capstan.activities.providers.base import RenderedCall, RenderedMessage
from capstan.activities.providers.openai_chat import OpenAIChat
from capstan.activities.providers.profiles import Profile
from capstan.activities.providers.wire_cache import WireCache, splice_body
from capstan.core.tooling import ToolSpec
from capstan.runtime.blobstore import LocalBlobStore

TOOLS = [
    ToolSpec(name="list_dir", description="list", parameters={"type": "object"}),
    ToolSpec(name="read_file", description="read ü", parameters={"type": "object"}),
]


def _profile(provider: str, **kw: object) -> Profile:
    return Profile(
        name="p",
        provider=provider,
        model="m",
        base_url="http://p.test",
        api_key=SecretStr("sk-test-0123456789"),
        **kw,
    )


def _turn(step: int, calls: int, text: str, error: bool) -> list[RenderedMessage]:
    """One step: an assistant message (maybe with reasoning) and its tool results."""
    bad_call = (RenderedCall(id=f"c{step}-x", name="read_file", arguments="{not json"),)
    assistant = RenderedMessage(
        role="assistant",
        content=text,
        tool_calls=tuple(
            RenderedCall(id=f"c{step}-{k}", name="list_dir", arguments=json.dumps({"p": k}))
            for k in range(calls)
        )
        + (bad_call if error else ()),
        reasoning="thought" if step % 2 else None,
        reasoning_signature="sig" if step % 2 else None,
    )
    results = [
        RenderedMessage(
            role="tool",
            content=f"Error (x) {step}" if error else f'out "{step}"\n\u2603',
            tool_call_id=f"c{step}-{k}",
            name="list_dir",
            is_error=error,
        )
        for k in range(calls)
    ]
    return [assistant, *results]


conversations = st.lists(
    st.tuples(st.integers(0, 3), st.text(max_size=20), st.booleans(), st.booleans()), max_size=6
).map(
    lambda steps: [
        RenderedMessage(role="system", content="sys"),
        RenderedMessage(role="user", content="task"),
        *[
            m
            for i, (calls, text, error, nudge) in enumerate(steps)
            for m in [
                *_turn(i, calls, text, error),
                *([RenderedMessage(role="user", content="")] if nudge else []),
            ]
        ],
    ]
)


@settings(max_examples=60, deadline=None)
@given(conversations, st.booleans(), st.booleans())
def test_spliced_bodies_equal_plain_bodies(
    messages: list[RenderedMessage], stream: bool, with_tools: bool
) -> None:
    http = httpx.AsyncClient()
    tools = TOOLS if with_tools else []
    for adapter in (
        OpenAIChat(_profile("openai", stream=stream), http),
        AnthropicMessages(_profile("anthropic", stream=stream), http),
    ):
        plain = adapter.body(messages, tools)
        twice = [json.loads(adapter.encoded_body(messages, tools)) for _ in range(2)]
        assert twice == [plain, plain]


def test_structured_mode_bodies_are_the_plain_body() -> None:
    adapter = OpenAIChat(_profile("openai", tool_mode="structured"), httpx.AsyncClient())
    messages = [RenderedMessage(role="user", content="hi"), *_turn(1, 1, "", False)]
    assert json.loads(adapter.encoded_body(messages, TOOLS)) == adapter.body(messages, TOOLS)


def test_equal_messages_are_encoded_once_and_different_ones_apart() -> None:
    cache = WireCache()
    encoded: list[str] = []

    def encode(m: RenderedMessage) -> bytes:
        encoded.append(m.content)
        return json.dumps([m.role, m.content, m.is_error], separators=(",", ":")).encode()

    first = RenderedMessage(role="tool", content="a", tool_call_id="c1")
    assert cache.encoded("f", first, encode) == b'["tool","a",false]'
    assert cache.encoded("f", first, encode) == b'["tool","a",false]'
    equal_twin = RenderedMessage(role="tool", content="a", tool_call_id="c1")
    assert cache.encoded("f", equal_twin, encode) == b'["tool","a",false]'
    assert encoded == ["a"]  # one encoding for every equal message
    for other in (
        RenderedMessage(role="tool", content="a", tool_call_id="c2"),
        RenderedMessage(role="tool", content="a", tool_call_id="c1", is_error=True),
        RenderedMessage(role="user", content="a"),
    ):
        cache.encoded("f", other, encode)
    cache.encoded("g", first, encode)
    assert encoded == ["a"] * 5  # any field, or another wire format, is another fragment


def test_the_cache_stays_within_its_bytes() -> None:
    cache = WireCache(max_bytes=100)
    kept = [RenderedMessage(role="user", content=str(i) * 30) for i in range(10)]
    for m in kept:
        cache.encoded("f", m, lambda m: m.content.encode())
    assert len(cache) == 3  # 3 x 30 bytes fit in 100, a fourth does not


def test_a_shared_fragment_lives_while_any_message_names_it() -> None:
    cache = WireCache(max_messages=2)
    prompt, twin, other = (RenderedMessage(role="system", content=c) for c in ("p", "p", "q"))
    first = cache.encoded("f", prompt, lambda m: m.content.encode())
    assert cache.encoded("f", twin, lambda m: b"never called") is first
    assert len(cache) == 1
    cache.encoded("f", other, lambda m: m.content.encode())  # `prompt` is dropped: twin stays
    assert len(cache) == 2
    assert cache.encoded("f", twin, lambda m: b"never called") is first


def test_messages_unused_for_a_while_are_released() -> None:
    now = [0.0]
    cache = WireCache(clock=lambda: now[0])
    old, twin, new = (RenderedMessage(role="user", content=c) for c in ("p", "p", "q"))
    cache.encoded("f", old, lambda m: m.content.encode())
    now[0] = 10
    cache.encoded("f", twin, lambda m: b"never called")  # shares `old`'s fragment
    cache.encoded("f", new, lambda m: m.content.encode())
    now[0] = 15
    assert cache.release(10)  # `old` only: the fragment lives on for `twin`
    assert len(cache) == 2 and not cache.release(10)
    assert cache.encoded("f", twin, lambda m: b"never called") == b"p"
    now[0] = 30
    assert cache.release(10) and len(cache) == 0


def test_splice_body_puts_the_list_first() -> None:
    assert json.loads(splice_body({}, "messages", [b"1", b'"x"'])) == {"messages": [1, "x"]}
    spliced = splice_body({"model": "m", "n": [1]}, "messages", [])
    assert json.loads(spliced) == {"messages": [], "model": "m", "n": [1]}


async def test_the_adapter_sends_the_spliced_body_as_json() -> None:
    seen: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        message = {"role": "assistant", "content": "ok"}
        return httpx.Response(200, json={"choices": [{"message": message}]})

    adapter = OpenAIChat(
        _profile("openai", stream=False), httpx.AsyncClient(transport=httpx.MockTransport(reply))
    )
    messages = [RenderedMessage(role="user", content="hi ü")]
    assert (await adapter.complete(messages, TOOLS)).text == "ok"
    assert seen[0].headers["content-type"] == "application/json"
    assert int(seen[0].headers["content-length"]) == len(seen[0].content)
    assert json.loads(seen[0].content) == adapter.body(messages, TOOLS)


def test_blob_fanout_directories_are_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    (tmp_path / "blobs").mkdir()  # so each mkdir below is one fan-out directory's
    made: list[Path] = []
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        made.append(self)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    digests = [store.put(f"blob {i}".encode()) for i in range(600)]
    fanouts = {d[:2] for d in digests}
    assert len(made) == len(fanouts) < len(digests)
    assert all(store.get(d) == f"blob {i}".encode() for i, d in enumerate(digests))


def test_a_wiped_store_is_written_again(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    first = store.put(b"one")
    for child in (tmp_path / "blobs" / first[:2]).iterdir():
        child.unlink()
    (tmp_path / "blobs" / first[:2]).rmdir()
    assert store.put(b"one") == first  # the directory it had made is gone: made again
    assert store.get(first) == b"one"

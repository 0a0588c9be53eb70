"""Provider adapters against httpx.MockTransport: OpenAI and Anthropic, plain and streamed,
every status and error shape, malformed replies, structured calls for small models; then the
profiles that configure them, argument repair, the result budget and cost."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from capstan.activities.model import cost_of
from capstan.activities.providers.anthropic import AnthropicMessages
from capstan.activities.providers.base import RenderedCall, RenderedMessage
from capstan.activities.providers.errors import scrub
from capstan.activities.providers.json_repair import repair_arguments
from capstan.activities.providers.openai_chat import OpenAIChat
from capstan.activities.providers.profiles import (
    Profile,
    ProfileError,
    load_profiles,
    model_chain,
    resolve_profile,
)
from capstan.activities.result_budget import ResultBudget, apply_budget
from capstan.core.messages import Usage
from capstan.core.models import Prices
from capstan.core.tooling import ToolSpec
from capstan.testing.fake_provider import FakeProvider, say
from capstan.testing.wire import Turn, anthropic_events, anthropic_message, openai_chunks

KEY = "sk-live-abcdefghijklmnop"
TOOLS = [ToolSpec(name="list_dir", description="list", parameters={"type": "object"})]
HELLO = [RenderedMessage(role="user", content="hi")]


def profile(provider: str = "openai", **kw: object) -> Profile:
    base = "http://p.test/v1" if provider == "openai" else "http://p.test"
    return Profile(
        name="p",
        provider=provider,  # type: ignore[arg-type]
        model="m",
        base_url=base,
        api_key=SecretStr(KEY),
        **kw,  # type: ignore[arg-type]
    )


def sse(events: list[tuple[str | None, str]]) -> httpx.Response:
    text = "".join((f"event: {e}\n" if e else "") + f"data: {d}\n\n" for e, d in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)


def openai(transport: httpx.MockTransport, **kw: object) -> OpenAIChat:
    return OpenAIChat(profile(**kw), httpx.AsyncClient(transport=transport))


def anthropic(transport: httpx.MockTransport, **kw: object) -> AnthropicMessages:
    return AnthropicMessages(profile("anthropic", **kw), httpx.AsyncClient(transport=transport))


TURN = Turn(
    step=2,
    model="m-1",
    content="Looking at the files now.",
    calls=[("list_dir", {"path": "."}), ("read_file", {"path": "a.txt"})],
    reasoning="think first",
    input_tokens=321,
)


def completion(message: dict[str, object], finish: str = "stop") -> dict[str, object]:
    """An OpenAI chat completion in one JSON body."""
    return {
        "model": "m-2026",
        "choices": [{"message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }


# OpenAI, one JSON reply ---------------------------------------------------------------------


async def test_request_shape_and_tool_call_parsing() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        calls = [{"id": "c1", "function": {"name": "list_dir", "arguments": '{"path": "."}'}}]
        msg = {"content": None, "tool_calls": calls}
        return httpx.Response(200, json=completion(msg, "tool_calls"))

    reply = await openai(httpx.MockTransport(handle)).complete(HELLO, TOOLS)
    body = json.loads(seen[0].content)
    assert seen[0].url == "http://p.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert body["tools"][0]["function"]["name"] == "list_dir" and body["tool_choice"] == "auto"
    assert reply.tool_calls[0].name == "list_dir"
    assert reply.tool_calls[0].arguments == '{"path": "."}'
    assert reply.usage.input_tokens == 11 and reply.usage.output_tokens == 7
    assert reply.stop_reason == "tool_calls" and reply.model == "m-2026" and reply.text == ""


async def test_missing_call_ids_and_object_arguments_are_normalised() -> None:
    calls = [{"function": {"name": "list_dir", "arguments": {"path": "x"}}}]
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, json=completion({"tool_calls": calls}))
    )
    reply = await openai(transport).complete([], TOOLS, step=4)
    assert reply.tool_calls[0].id == "call_4_0"
    assert json.loads(reply.tool_calls[0].arguments) == {"path": "x"}


async def test_reasoning_content_is_kept() -> None:
    msg = {"content": "answer", "reasoning_content": "because"}
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=completion(msg)))
    reply = await openai(transport).complete([], [])
    assert reply.text == "answer" and reply.reasoning == "because"


# OpenAI streaming ---------------------------------------------------------------------------


async def test_openai_stream_assembles_text_calls_usage_and_deltas() -> None:
    seen: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return sse([(None, d) for d in openai_chunks(TURN)])

    deltas: list[str] = []
    reply = await openai(httpx.MockTransport(handle)).complete(HELLO, TOOLS, 2, deltas.append)
    assert seen[0]["stream"] is True and seen[0]["stream_options"] == {"include_usage": True}
    assert reply.text == TURN.content and "".join(deltas) == TURN.content
    assert reply.reasoning == "think first"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("call_2_0", "list_dir", {"path": "."}),
        ("call_2_1", "read_file", {"path": "a.txt"}),
    ]
    assert reply.usage.input_tokens == 321 and reply.stop_reason == "tool_calls"


@pytest.mark.parametrize(
    ("cut", "kind"),
    [
        (lambda ev: ev[:-1], "ModelStreamCut"),  # no [DONE]
        (lambda ev: ev[:3], "ModelStreamCut"),  # cut mid-way
        (lambda ev: [*ev[:2], "{not json", *ev[2:]], "ModelResponseInvalid"),
        (lambda ev: [*ev[:2], '{"error": {"message": "boom"}}'], "ModelServerError"),
        (lambda ev: ['{"error": {"code": "context_length_exceeded"}}'], "ModelContextOverflow"),
    ],
)
async def test_openai_broken_streams(cut, kind: str) -> None:
    events = cut(openai_chunks(TURN))
    transport = httpx.MockTransport(lambda r: sse([(None, d) for d in events]))
    with pytest.raises(ApplicationError) as err:
        await openai(transport).complete(HELLO, TOOLS, 2)
    assert err.value.type == kind


async def test_openai_length_kept_and_content_filter_refused() -> None:
    for stop, ok in (("length", True), ("content_filter", False)):
        events = openai_chunks(Turn(step=0, model="m", content="partial", stop=stop))
        transport = httpx.MockTransport(lambda r, e=events: sse([(None, d) for d in e]))
        if ok:
            reply = await openai(transport).complete(HELLO, [], 0)
            assert reply.stop_reason == "length" and reply.text == "partial"
        else:
            with pytest.raises(ApplicationError) as err:
                await openai(transport).complete(HELLO, [], 0)
            assert err.value.type == "ModelContentFiltered" and err.value.non_retryable


async def test_openai_assistant_tool_messages_carry_empty_string_content() -> None:
    bodies: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return sse([(None, d) for d in openai_chunks(Turn(step=1, model="m", content="ok"))])

    history = [
        *HELLO,
        RenderedMessage(role="assistant", content="", tool_calls=(RenderedCall("c", "t", "{}"),)),
        RenderedMessage(role="tool", content="out", tool_call_id="c"),
    ]
    await openai(httpx.MockTransport(handle)).complete(history, [], 1)
    assert bodies[0]["messages"][1]["content"] == ""  # type: ignore[index]


# Status and error mapping (one retry layer: the type says whether Temporal retries) -----------


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, "ModelBadRequest", False),
        (401, "ModelAuthError", False),
        (403, "ModelAuthError", False),
        (404, "ModelNotFound", False),
        (408, "ModelServerError", True),
        (429, "ModelRateLimited", True),
        (500, "ModelServerError", True),
        (503, "ModelServerError", True),
    ],
)
async def test_status_mapping(status: int, kind: str, retryable: bool) -> None:
    body = {"error": {"message": f"nope, your key {KEY} is wrong"}}
    transport = httpx.MockTransport(lambda r: httpx.Response(status, json=body))
    with pytest.raises(ApplicationError) as err:
        await openai(transport).complete([], [])
    assert err.value.type == kind
    assert err.value.non_retryable is (not retryable)
    assert KEY not in err.value.message and f"HTTP {status}" in err.value.message


@pytest.mark.parametrize(
    ("status", "body", "kind", "retryable"),
    [
        (400, '{"error": {"code": "context_length_exceeded"}}', "ModelContextOverflow", False),
        (429, '{"error": {"type": "insufficient_quota"}}', "ModelQuotaExhausted", False),
        (400, '{"error": {"code": "content_filter"}}', "ModelContentFiltered", False),
        (413, "too big", "ModelPayloadTooLarge", False),
        (409, "conflict", "ModelServerError", True),
        (529, "overloaded", "ModelOverloaded", True),
    ],
)
async def test_more_status_shapes(status: int, body: str, kind: str, retryable: bool) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(status, text=body))
    with pytest.raises(ApplicationError) as err:
        await openai(transport).complete(HELLO, [], 0)
    assert err.value.type == kind and err.value.non_retryable is (not retryable)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "9999"}, 300),
    ],
)
async def test_retry_after_becomes_next_retry_delay(
    headers: dict[str, str], seconds: float
) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(429, headers=headers, text="slow"))
    with pytest.raises(ApplicationError) as err:
        await openai(transport).complete([], [])
    assert err.value.next_retry_delay == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "body", [b"not json", b'{"choices": []}', b'{"choices": [{"message": 3}]}', b"{}"]
)
async def test_malformed_bodies_are_retryable_invalid_responses(body: bytes) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    with pytest.raises(ApplicationError) as err:
        await openai(transport).complete([], [])
    assert err.value.type == "ModelResponseInvalid" and not err.value.non_retryable


async def test_transport_errors_are_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out")

    for handler, kind in ((refuse, "ModelConnectionError"), (slow, "ModelTimeout")):
        with pytest.raises(ApplicationError) as err:
            await openai(httpx.MockTransport(handler)).complete([], [])
        assert err.value.type == kind and not err.value.non_retryable


def test_scrub_removes_key_shapes() -> None:
    text = scrub("key sk-abc123456789xyz and Bearer abc.def and token_ABCDEFGH1234", ())
    assert "sk-abc" not in text and "abc.def" not in text and "ABCDEFGH1234" not in text


# Anthropic ------------------------------------------------------------------------------------


async def test_anthropic_request_shape_caching_and_thinking_round_trip() -> None:
    bodies: list[dict[str, object]] = []
    headers: list[httpx.Headers] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        headers.append(request.headers)
        return httpx.Response(200, json=anthropic_message(TURN))

    history = [
        RenderedMessage(role="system", content="be good"),
        RenderedMessage(role="user", content="task"),
        RenderedMessage(
            role="assistant",
            content="",
            reasoning="secret plan",
            reasoning_signature="sig-1",
            tool_calls=(RenderedCall("t1", "list_dir", '{"path": "."}'),),
        ),
        RenderedMessage(role="tool", content="a.txt", tool_call_id="t1"),
        RenderedMessage(role="user", content="also this", name=None),
    ]
    reply = await anthropic(httpx.MockTransport(handle), stream=False).complete(history, TOOLS, 2)
    body = bodies[0]
    assert headers[0]["x-api-key"] == KEY and headers[0]["anthropic-version"] == "2023-06-01"
    assert body["system"] == [
        {"type": "text", "text": "be good", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}  # type: ignore[index]
    turns = body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    assistant = turns[1]["content"]  # type: ignore[index]
    assert assistant[0] == {"type": "thinking", "thinking": "secret plan", "signature": "sig-1"}
    assert {k: v for k, v in assistant[1].items() if k != "cache_control"} == {
        "type": "tool_use",
        "id": "t1",
        "name": "list_dir",
        "input": {"path": "."},
    }
    last = turns[2]["content"]  # type: ignore[index]
    assert last[0]["type"] == "tool_result" and last[1] == {"type": "text", "text": "also this"}
    assert turns[1]["content"][-1]["cache_control"] == {"type": "ephemeral"}  # type: ignore[index]
    assert reply.reasoning == "think first" and reply.reasoning_signature == "sig-2"
    assert [c.id for c in reply.tool_calls] == ["toolu_2_0", "toolu_2_1"]
    assert reply.usage.cache_read_tokens == 50 and reply.usage.input_tokens == 321
    assert reply.stop_reason == "tool_calls"


async def test_anthropic_stream_rebuilds_the_message() -> None:
    deltas: list[str] = []
    transport = httpx.MockTransport(lambda r: sse(anthropic_events(TURN)))  # type: ignore[arg-type]
    reply = await anthropic(transport).complete(HELLO, TOOLS, 2, deltas.append)
    assert reply.text == TURN.content == "".join(deltas)
    assert reply.reasoning == "think first" and reply.reasoning_signature == "sig-2"
    assert json.loads(reply.tool_calls[1].arguments) == {"path": "a.txt"}
    assert reply.usage.output_tokens == 20


@pytest.mark.parametrize(
    ("events", "kind"),
    [
        (lambda ev: ev[:-1], "ModelStreamCut"),
        (
            lambda ev: [
                *ev[:2],
                ("error", '{"type": "error", "error": {"type": "overloaded_error"}}'),
            ],
            "ModelOverloaded",
        ),
        (
            lambda ev: [("error", '{"type": "error", "error": {"message": "prompt is too long"}}')],
            "ModelContextOverflow",
        ),
    ],
)
async def test_anthropic_broken_streams(events, kind: str) -> None:
    chosen = events(anthropic_events(TURN))
    transport = httpx.MockTransport(lambda r: sse(chosen))
    with pytest.raises(ApplicationError) as err:
        await anthropic(transport).complete(HELLO, TOOLS, 2)
    assert err.value.type == kind


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("max_tokens", "length"), ("end_turn", "stop"), ("refusal", "refusal")],
)
async def test_anthropic_stop_reasons(stop: str, expected: str) -> None:
    message = anthropic_message(
        Turn(step=0, model="m", content="x" if stop != "refusal" else "", stop=stop)
    )
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=message))
    reply = await anthropic(transport, stream=False).complete(HELLO, [], 0)
    assert reply.stop_reason == expected
    if stop == "refusal":
        assert "refused" in reply.text


async def test_anthropic_context_window_stop_is_overflow() -> None:
    message = anthropic_message(
        Turn(step=0, model="m", content="", stop="model_context_window_exceeded")
    )
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=message))
    with pytest.raises(ApplicationError) as err:
        await anthropic(transport, stream=False).complete(HELLO, [], 0)
    assert err.value.type == "ModelContextOverflow"


async def test_anthropic_error_shapes() -> None:
    cases = [
        (
            400,
            '{"type":"error","error":{"type":"invalid_request_error",'
            '"message":"prompt is too long: 210000 tokens"}}',
            "ModelContextOverflow",
        ),
        (529, '{"type":"error","error":{"type":"overloaded_error"}}', "ModelOverloaded"),
        (413, '{"type":"error","error":{"type":"request_too_large"}}', "ModelPayloadTooLarge"),
        (401, '{"type":"error","error":{"type":"authentication_error"}}', "ModelAuthError"),
    ]
    for status, body, kind in cases:
        transport = httpx.MockTransport(lambda r, s=status, b=body: httpx.Response(s, text=b))
        with pytest.raises(ApplicationError) as err:
            await anthropic(transport).complete(HELLO, [], 0)
        assert err.value.type == kind, (status, body)


# Fuzz: whatever a provider sends, the adapter answers a reply or a typed ApplicationError ----


@settings(max_examples=200, deadline=None)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda c: (
                st.lists(c, max_size=3)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "choices",
                            "message",
                            "content",
                            "tool_calls",
                            "usage",
                            "type",
                            "stop_reason",
                            "delta",
                            "function",
                            "name",
                            "arguments",
                        ]
                    ),
                    c,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    ),
    provider=st.sampled_from(["openai", "anthropic"]),
    stream=st.booleans(),
)
async def test_fuzz_malformed_replies_never_escape_as_other_errors(
    body: bytes, provider: str, stream: bool
) -> None:
    if stream:
        response = httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b"data: " + body.replace(b"\n", b" ") + b"\n\n",
        )
    else:
        response = httpx.Response(200, content=body)
    transport = httpx.MockTransport(lambda r: response)
    adapter = openai(transport) if provider == "openai" else anthropic(transport, stream=False)
    try:
        await adapter.complete(HELLO, TOOLS, 0)
    except ApplicationError as exc:
        assert exc.type and exc.type.startswith("Model")


# Profiles, repair, budget, cost --------------------------------------------------------------


def test_profile_resolution() -> None:
    env = {
        "CAPSTAN_MODEL": "openai:gpt-x",
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": "http://h/v1/",
    }
    profile = resolve_profile("default", env)
    assert (profile.provider, profile.model, profile.base_url) == ("openai", "gpt-x", "http://h/v1")
    assert KEY not in repr(profile)  # SecretStr
    assert resolve_profile("openai:other", env).model == "other"
    with pytest.raises(ProfileError, match="CAPSTAN_MODEL=openai:"):
        resolve_profile("default", {})
    with pytest.raises(ProfileError, match="provider:model"):
        resolve_profile("gpt-4", env)
    with pytest.raises(ProfileError, match="unknown provider"):
        resolve_profile("acme:x", env)


def test_profiles_file_and_fallback_chain(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(
        '[profiles.main]\nprovider = "anthropic"\nmodel = "claude-x"\napi_key_env = "MY_KEY"\n'
        'context_window = 200000\nmax_output_tokens = 8192\nfallback = ["backup", "main"]\n'
        "prices = { input = 3.0, output = 15.0, cache_read = 0.3 }\n\n"
        '[profiles.backup]\nprovider = "openai"\nmodel = "gpt-x"\nbase_url = "http://b/v1"\n'
    )
    table = load_profiles(path)
    env = {"CAPSTAN_MODEL": "main", "MY_KEY": KEY}
    main = resolve_profile("default", env, table)
    assert (main.provider, main.model, main.base_url) == (
        "anthropic",
        "claude-x",
        "https://api.anthropic.com",
    )
    assert main.api_key is not None and main.api_key.get_secret_value() == KEY
    chain = model_chain("default", env, table)
    assert [m.profile for m in chain.models] == ["default", "backup", "main"]
    assert chain.models[0].usable_window == 200000 - 8192
    assert KEY not in chain.model_dump_json()
    broken = tmp_path / "bad.toml"
    broken.write_text('[profiles.x]\nprovider = "acme"\nmodel = "m"\n')
    with pytest.raises(ProfileError, match="not usable"):
        load_profiles(broken)


@pytest.mark.parametrize(
    ("raw", "fixed", "repaired"),
    [
        ('{"a": 1}', '{"a": 1}', False),
        ("", "{}", True),
        ('```json\n{"a": 1,}\n```', '{"a": 1}', True),
        ('{"a": [1, 2', '{"a": [1, 2]}', True),
        ('{"a": {"b": 1}', '{"a": {"b": 1}}', True),
        ('{"a": b}', '{"a": b}', False),  # a bare word: ambiguous, left for the tool to report
        ('{"a": "unterminated', '{"a": "unterminated', False),
        ("[1, 2]", "[1, 2]", False),  # not an object
    ],
)
def test_json_repair_only_when_unambiguous(raw: str, fixed: str, repaired: bool) -> None:
    assert repair_arguments(raw) == (fixed, repaired)


def test_budget_caps_lines_bytes_and_tokens_utf8_safely() -> None:
    text = "é" * 50 + "\n" + "line\n" * 100
    cut = apply_budget(
        text, "ab" * 32, ResultBudget(max_lines=3, max_bytes=1000, max_tokens=10_000)
    )
    assert cut.startswith("é" * 50 + "\nline\nline\n[truncated")
    assert f"read_result(ref={'ab' * 32!r}, offset=" in cut
    byte_cut = apply_budget("é" * 100, None, ResultBudget(max_bytes=51))
    kept = byte_cut.split("\n[truncated")[0]
    assert kept == "é" * 25  # 51 bytes would split a character: cut at 50
    token_cut = apply_budget("word " * 5000, "r", ResultBudget(max_tokens=100))
    assert len(token_cut.split("\n[truncated")[0].split()) <= 101
    assert apply_budget("small", "r", ResultBudget()) == "small"


def test_cost_uses_cache_prices() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=400_000)
    prices = Prices(input=3.0, output=15.0, cache_read=0.3)
    assert cost_of(usage, prices) == pytest.approx(0.6 * 3.0 + 0.4 * 0.3 + 0.1 * 15.0)


# Structured tool calling for small local models ------------------------------------------


async def test_structured_mode_asks_for_a_schema_and_turns_json_into_a_call() -> None:
    bodies: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        content = json.dumps({"name": "list_dir", "arguments": {"path": "."}})
        return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})

    history = [
        *HELLO,
        RenderedMessage(
            role="assistant", content="", tool_calls=(RenderedCall("c", "list_dir", "{}"),)
        ),
        RenderedMessage(role="tool", content="a.txt", tool_call_id="c", name="list_dir"),
    ]
    adapter = openai(httpx.MockTransport(handle), tool_mode="structured", stream=False)
    reply = await adapter.complete(history, TOOLS, 3)
    body = bodies[0]
    assert "tools" not in body and body["temperature"] == 0
    schema = body["response_format"]["schema"]  # type: ignore[index]
    assert schema["oneOf"][0]["properties"]["name"] == {"const": "list_dir"}
    wire = body["messages"]
    assert wire[0]["role"] == "system" and "list_dir" in wire[0]["content"]  # type: ignore[index]
    assert json.loads(wire[2]["content"]) == {"name": "list_dir", "arguments": {}}  # type: ignore[index]
    assert wire[3] == {"role": "user", "content": "Result of list_dir:\na.txt"}  # type: ignore[index]
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_3_0", "list_dir", '{"path": "."}')
    ]


@pytest.mark.parametrize(
    ("text", "called"),
    [
        ('{"name": "list_dir", "arguments": {"path": "."}}', True),
        ('```json\n{"name": "list_dir", "arguments": {}}\n```', True),
        ('{"name": "rm", "arguments": {}}', False),  # not an offered tool
        ('I will call {"name": "list_dir", "arguments": {}}', False),  # not the whole reply
        ('{"name": "list_dir", "arguments": {}, "extra": 1}', False),  # not only a call
    ],
)
async def test_printed_json_call_is_taken_only_when_unambiguous(text: str, called: bool) -> None:
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, json={"choices": [{"message": {"content": text}}]})
    )
    reply = await openai(transport, stream=False).complete(HELLO, TOOLS, 1)
    assert bool(reply.tool_calls) is called
    assert reply.text == ("" if called else text)


def test_local_profile_defaults() -> None:
    p = resolve_profile("local:smollm2", {"CAPSTAN_LOCAL_MODEL_URL": "http://127.0.0.1:9/v1"})
    assert (p.provider, p.tool_mode, p.stream, p.context_window) == (
        "local",
        "structured",
        False,
        8192,
    )
    assert p.base_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_streamed_calls_share_one_pooled_connection(provider: str) -> None:
    """A stream is read to the end of its body, so the connection goes back to the pool: with a
    remote provider every new connection is a TCP and TLS handshake."""
    with FakeProvider([say(content="hello")]) as fake:
        base = fake.base_url if provider == "openai" else fake.base_url.removesuffix("/v1")
        async with httpx.AsyncClient() as http:
            adapter = (OpenAIChat if provider == "openai" else AnthropicMessages)(
                profile(provider, stream=True).model_copy(update={"base_url": base}), http
            )
            for _ in range(3):
                reply = await adapter.complete([RenderedMessage(role="user", content="hi")], [])
                assert reply.text == "hello"
        assert fake.connections_opened == 1

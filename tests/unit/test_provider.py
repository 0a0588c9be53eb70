"""The OpenAI-compatible adapter against httpx.MockTransport: every status and shape."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from capstan.activities.providers.base import RenderedMessage
from capstan.activities.providers.errors import scrub
from capstan.activities.providers.openai_chat import OpenAIChat
from capstan.activities.providers.profiles import Profile, ProfileError, resolve_profile
from capstan.core.tooling import ToolSpec

KEY = "sk-live-abcdefghijklmnop"
PROFILE = Profile(
    name="default",
    provider="openai",
    model="m",
    base_url="http://provider.test/v1",
    api_key=SecretStr(KEY),
)
TOOLS = [ToolSpec(name="list_dir", description="list", parameters={"type": "object"})]


def adapter(handler: httpx.MockTransport) -> OpenAIChat:
    return OpenAIChat(PROFILE, httpx.AsyncClient(transport=handler))


def completion(message: dict[str, object], finish: str = "stop") -> dict[str, object]:
    return {
        "model": "m-2026",
        "choices": [{"message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }


async def test_request_shape_and_tool_call_parsing() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        calls = [{"id": "c1", "function": {"name": "list_dir", "arguments": '{"path": "."}'}}]
        msg = {"content": None, "tool_calls": calls}
        return httpx.Response(200, json=completion(msg, "tool_calls"))

    reply = await adapter(httpx.MockTransport(handle)).complete(
        [RenderedMessage(role="user", content="hi")], TOOLS
    )
    body = json.loads(seen[0].content)
    assert seen[0].url == "http://provider.test/v1/chat/completions"
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
    reply = await adapter(transport).complete([], TOOLS, step=4)
    assert reply.tool_calls[0].id == "call_4_0"
    assert json.loads(reply.tool_calls[0].arguments) == {"path": "x"}


async def test_reasoning_content_is_kept() -> None:
    msg = {"content": "answer", "reasoning_content": "because"}
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=completion(msg)))
    reply = await adapter(transport).complete([], [])
    assert reply.text == "answer" and reply.reasoning == "because"


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
        await adapter(transport).complete([], [])
    assert err.value.type == kind
    assert err.value.non_retryable is (not retryable)
    assert KEY not in err.value.message and f"HTTP {status}" in err.value.message


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
        await adapter(transport).complete([], [])
    assert err.value.next_retry_delay == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "body", [b"not json", b'{"choices": []}', b'{"choices": [{"message": 3}]}', b"{}"]
)
async def test_malformed_bodies_are_retryable_invalid_responses(body: bytes) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    with pytest.raises(ApplicationError) as err:
        await adapter(transport).complete([], [])
    assert err.value.type == "ModelResponseInvalid" and not err.value.non_retryable


async def test_transport_errors_are_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out")

    for handler, kind in ((refuse, "ModelConnectionError"), (slow, "ModelTimeout")):
        with pytest.raises(ApplicationError) as err:
            await adapter(httpx.MockTransport(handler)).complete([], [])
        assert err.value.type == kind and not err.value.non_retryable


def test_scrub_removes_key_shapes() -> None:
    text = scrub("key sk-abc123456789xyz and Bearer abc.def and token_ABCDEFGH1234", ())
    assert "sk-abc" not in text and "abc.def" not in text and "ABCDEFGH1234" not in text


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

"""The Anthropic Messages API over httpx: tool_use / tool_result blocks, thinking round-trips,
prompt caching on the stable prefix, streaming.

Prompt caching: breakpoints (`cache_control: ephemeral`) go on the system prompt, the last tool
and the last block of the conversation before the newest turn, so each call re-reads the
earlier prefix from the cache. Thinking blocks are sent back verbatim with their signature.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from httpx_sse import EventSource
from temporalio.exceptions import ApplicationError

from capstan.activities.providers.base import (
    DeltaSink,
    ProviderReply,
    RenderedMessage,
    WireToolCall,
)
from capstan.activities.providers.errors import context_overflow, malformed, scrub, stream_cut
from capstan.activities.providers.http_adapter import HttpAdapter
from capstan.activities.providers.json_repair import repair_arguments
from capstan.activities.providers.wire_cache import dumps, splice_body, wire_cache
from capstan.core.messages import Usage
from capstan.core.model_errors import ModelErrorKind
from capstan.core.tooling import ToolSpec

__all__ = ["AnthropicMessages", "encoded_turns", "to_anthropic"]

API_VERSION = "2023-06-01"
CACHE = {"type": "ephemeral"}


def _assistant_blocks(m: RenderedMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if m.reasoning and m.reasoning_signature:
        blocks.append(
            {"type": "thinking", "thinking": m.reasoning, "signature": m.reasoning_signature}
        )
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        try:
            arguments = json.loads(c.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {"_unparsed_arguments": c.arguments}
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": arguments})
    return blocks or [{"type": "text", "text": "(no reply)"}]


def to_anthropic(
    messages: list[RenderedMessage],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) with roles alternating and tool results in user turns."""
    system = [{"type": "text", "text": m.content} for m in messages if m.role == "system"]
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "assistant":
            turns.append({"role": "assistant", "content": _assistant_blocks(m)})
            continue
        block = _user_block(m)
        if turns and turns[-1]["role"] == "user":
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": "user", "content": [block]})
    return system, turns


def _user_block(m: RenderedMessage) -> dict[str, Any]:
    """A tool result or a person's text: a block of a user turn."""
    if m.role != "tool":
        return {"type": "text", "text": m.content or "(empty)"}
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
    block["content"] = m.content
    if m.is_error:
        block["is_error"] = True
    return block


def _encoded_blocks(m: RenderedMessage) -> bytes:
    blocks = _assistant_blocks(m) if m.role == "assistant" else [_user_block(m)]
    return b",".join(dumps(b) for b in blocks)


def encoded_turns(messages: list[RenderedMessage]) -> list[bytes]:
    """`to_anthropic`'s turns with their cache breakpoint, encoded: each message's blocks come
    from the worker's `wire_cache`, so only the newest are encoded."""
    turns: list[tuple[str, list[bytes]]] = []
    for m in messages:
        if m.role == "system":
            continue
        fragment = wire_cache.encoded("anthropic", m, _encoded_blocks)
        if m.role != "assistant" and turns and turns[-1][0] == "user":
            turns[-1][1].append(fragment)
        else:
            turns.append(("assistant" if m.role == "assistant" else "user", [fragment]))
    if len(turns) >= 3:  # a fragment ends with its last block's "}": the breakpoint goes in it
        blocks = turns[-2][1]
        blocks[-1] = blocks[-1][:-1] + b',"cache_control":' + dumps(CACHE) + b"}"
    return [
        b'{"role":' + dumps(role) + b',"content":[' + b",".join(blocks) + b"]}"
        for role, blocks in turns
    ]


def _with_cache_breakpoints(
    system: list[dict[str, Any]], turns: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> None:
    if system:
        system[-1]["cache_control"] = CACHE
    if tools:
        tools[-1]["cache_control"] = CACHE
    # the stable prefix ends with the turn before the newest user turn
    if len(turns) >= 3:
        turns[-2]["content"][-1]["cache_control"] = CACHE


class AnthropicMessages(HttpAdapter):
    """Adapter for `POST {base_url}/v1/messages`."""

    def body(self, messages: list[RenderedMessage], tools: list[ToolSpec]) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        wire_tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools
        ]
        _with_cache_breakpoints(system, turns, wire_tools)
        body: dict[str, Any] = {
            "model": self.profile.model,
            "max_tokens": self.profile.max_output_tokens,
            "messages": turns,
        }
        if system:
            body["system"] = system
        if wire_tools:
            body["tools"] = wire_tools
        if self.profile.stream:
            body["stream"] = True
        return body

    def encoded_body(self, messages: list[RenderedMessage], tools: list[ToolSpec]) -> bytes:
        """`body` as the JSON bytes sent, its turns from `encoded_turns`."""
        fields = self.body([m for m in messages if m.role == "system"], tools)
        del fields["messages"]
        return splice_body(fields, "messages", encoded_turns(messages))

    async def complete(
        self,
        messages: list[RenderedMessage],
        tools: list[ToolSpec],
        step: int = 0,
        on_delta: DeltaSink | None = None,
    ) -> ProviderReply:
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self.profile.api_key:
            headers["x-api-key"] = self.profile.api_key.get_secret_value()

        async def read(response: httpx.Response, streamed: bool) -> ProviderReply:
            if streamed:
                return self._reply(await self._read_stream(response, on_delta))
            return self._reply(json.loads(await response.aread()))

        url = f"{self.profile.base_url}/v1/messages"
        return await self.exchange(url, self.encoded_body(messages, tools), headers, read)

    async def _read_stream(
        self, response: httpx.Response, on_delta: DeltaSink | None
    ) -> dict[str, Any]:
        """Rebuild the final message from the event stream."""
        message: dict[str, Any] | None = None
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        stopped = False
        async for event in EventSource(response).aiter_sse():
            try:
                data = json.loads(event.data) if event.data else {}
            except json.JSONDecodeError:
                raise malformed(f"a stream event is not JSON: {event.data[:80]!r}") from None
            kind = data.get("type", event.event)
            if kind == "error":
                raise _stream_error(data.get("error", data), self.secrets)
            if kind == "message_start":
                message = dict(data["message"])
            elif kind == "content_block_start":
                blocks[data["index"]] = dict(data["content_block"])
            elif kind == "content_block_delta":
                _apply_delta(blocks, partial, data, on_delta)
            elif kind == "message_delta" and message is not None:
                message["stop_reason"] = data.get("delta", {}).get("stop_reason")
                message.setdefault("usage", {}).update(data.get("usage") or {})
            elif kind == "message_stop":
                stopped = True
        if message is None or not stopped:
            raise stream_cut("no message_stop event")
        for index, text in partial.items():
            try:
                blocks[index]["input"] = json.loads(text) if text else {}
            except json.JSONDecodeError:
                blocks[index]["input_text"] = text
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message

    def _reply(self, message: Any) -> ProviderReply:
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            raise malformed("no content blocks in the message")
        text, thinking, signature, calls = [], [], None, []
        for block in message["content"]:
            kind = block.get("type")
            if kind == "text":
                text.append(block.get("text", ""))
            elif kind == "thinking":
                thinking.append(block.get("thinking", ""))
                signature = block.get("signature") or signature
            elif kind == "tool_use":
                raw = block.get("input_text") or json.dumps(block.get("input") or {})
                fixed, repaired = repair_arguments(raw)
                calls.append(
                    WireToolCall(
                        id=block["id"], name=block["name"], arguments=fixed, repaired=repaired
                    )
                )
        stop = message.get("stop_reason") or "end_turn"
        if stop == "model_context_window_exceeded":
            raise context_overflow("the model stopped: model_context_window_exceeded")
        if stop == "refusal" and not text and not calls:
            text.append("(the model refused to answer)")
        u = message.get("usage") or {}
        return ProviderReply(
            text="".join(text),
            reasoning="".join(thinking) or None,
            reasoning_signature=signature,
            tool_calls=calls,
            usage=Usage(
                input_tokens=int(u.get("input_tokens") or 0)
                + int(u.get("cache_read_input_tokens") or 0)
                + int(u.get("cache_creation_input_tokens") or 0),
                output_tokens=int(u.get("output_tokens") or 0),
                cache_read_tokens=int(u.get("cache_read_input_tokens") or 0),
                cache_write_tokens=int(u.get("cache_creation_input_tokens") or 0),
            ),
            stop_reason={"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}.get(
                stop, stop
            ),
            model=message.get("model") or self.profile.model,
        )


def _apply_delta(
    blocks: dict[int, dict[str, Any]],
    partial: dict[int, str],
    data: dict[str, Any],
    on_delta: DeltaSink | None,
) -> None:
    index, delta = data["index"], data.get("delta", {})
    block = blocks.setdefault(index, {"type": "text", "text": ""})
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
        if on_delta:
            on_delta(delta.get("text", ""))
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta.get("signature", "")
    elif kind == "input_json_delta":
        partial[index] = partial.get(index, "") + delta.get("partial_json", "")


def _stream_error(error: Any, secrets: tuple[str, ...]) -> ApplicationError:
    detail = scrub(json.dumps(error), secrets)
    kind = error.get("type", "") if isinstance(error, dict) else ""
    if "prompt is too long" in detail:
        return context_overflow(detail)
    if kind == "overloaded_error":
        return ApplicationError(
            f"provider overloaded mid-stream: {detail}", type=ModelErrorKind.OVERLOADED
        )
    return ApplicationError(
        f"the provider reported an error mid-stream: {detail}", type=ModelErrorKind.SERVER_ERROR
    )

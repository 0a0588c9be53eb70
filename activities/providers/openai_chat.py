"""OpenAI-compatible chat completions over httpx (OpenAI, vLLM, Ollama, llama.cpp, DeepSeek...).

Streaming (SSE, with `stream_options.include_usage`) or a single JSON reply. Reasoning fields
(`reasoning_content`, `reasoning`) are kept; tool-call arguments are repaired only where the
repair is unambiguous; assistant tool-call messages carry `content: ""`, never null (several
local servers reject null). No SDK, no retries here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import EventSource
from pydantic import BaseModel, ValidationError
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

__all__ = [
    "OpenAIChat",
    "structured_call",
    "to_openai_messages",
    "to_structured_messages",
    "tool_choice_schema",
]


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Response(BaseModel):
    model: str | None = None
    choices: list[_Choice]
    usage: _Usage | None = None


def structured_call(text: str, names: set[str], step: int) -> WireToolCall | None:
    """A tool call written as the whole reply, `{"name": ..., "arguments": {...}}`, when that
    reading is unambiguous: the reply is exactly one JSON object naming an offered tool."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(stripped, strict=False)  # small models put raw newlines in strings
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if not isinstance(arguments, dict) or set(value) - {"name", "arguments", "parameters"}:
        return None
    return WireToolCall(
        id=f"call_{step}_0", name=value["name"], arguments=json.dumps(arguments), repaired=True
    )


def tool_choice_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    """A JSON schema whose values are exactly the calls of the offered tools. The tools'
    definitions (`$defs`, which a typed `finish` carries) move to the root, where their
    `#/$defs/...` references point."""
    definitions: dict[str, Any] = {}
    choices = []
    for t in tools:
        parameters = {k: v for k, v in t.parameters.items() if k != "$defs"}
        definitions.update(t.parameters.get("$defs", {}))
        choices.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": parameters},
                "required": ["name", "arguments"],
            }
        )
    return {"oneOf": choices, **({"$defs": definitions} if definitions else {})}


def _tool_guide(tools: list[ToolSpec]) -> str:
    lines = ['Reply with exactly one JSON object: {"name": <tool>, "arguments": {...}}.', "Tools:"]
    for t in tools:
        params = ", ".join(t.parameters.get("properties", {}))
        lines.append(
            f"- {t.name}({params}): {t.description.splitlines()[0] if t.description else ''}"
        )
    return "\n".join(lines)


def to_structured_messages(
    messages: list[RenderedMessage], tools: list[ToolSpec]
) -> list[dict[str, Any]]:
    """For servers without tool calling: calls as JSON text, results as user messages."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": _tool_guide(tools)}]
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            c = m.tool_calls[0]
            call = {"name": c.name, "arguments": json.loads(c.arguments or "{}")}
            wire.append({"role": "assistant", "content": json.dumps(call)})
        elif m.role == "tool":
            wire.append({"role": "user", "content": f"Result of {m.name}:\n{m.content}"})
        else:
            wire.append({"role": m.role, "content": m.content})
    return wire


def to_openai_messages(messages: list[RenderedMessage]) -> list[dict[str, Any]]:
    return [_openai_message(m) for m in messages]


def _openai_message(m: RenderedMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    if m.role != "assistant":
        return {"role": m.role, "content": m.content}
    entry: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
    if m.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    return entry


def _encoded_openai_message(m: RenderedMessage) -> bytes:
    return dumps(_openai_message(m))


class OpenAIChat(HttpAdapter):
    """Adapter for `POST {base_url}/chat/completions`."""

    def body(self, messages: list[RenderedMessage], tools: list[ToolSpec]) -> dict[str, Any]:
        if tools and self.profile.tool_mode == "structured":
            return {
                "model": self.profile.model,
                "messages": to_structured_messages(messages, tools),
                "max_tokens": self.profile.max_output_tokens,
                "temperature": 0,
                "response_format": {"type": "json_object", "schema": tool_choice_schema(tools)},
            }
        return {"model": self.profile.model, "messages": to_openai_messages(messages)} | (
            self._options(tools)
        )

    def encoded_body(self, messages: list[RenderedMessage], tools: list[ToolSpec]) -> bytes:
        """`body` as the JSON bytes sent: each message encoded once per worker (`wire_cache`)."""
        if tools and self.profile.tool_mode == "structured":
            return dumps(self.body(messages, tools))
        fragments = [wire_cache.encoded("openai", m, _encoded_openai_message) for m in messages]
        fields = {"model": self.profile.model} | self._options(tools)
        return splice_body(fields, "messages", fragments)

    def _options(self, tools: list[ToolSpec]) -> dict[str, Any]:
        """Everything in a (native tool calling) body but the model and the messages."""
        body: dict[str, Any] = {}
        if self.profile.max_output_tokens:
            body["max_tokens"] = self.profile.max_output_tokens
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                        # a typed `finish` whose schema OpenAI's strict mode takes as it is
                        **({"strict": True} if t.strict else {}),
                    },
                }
                for t in tools
            ]
            body["tool_choice"] = "auto"
        if self.profile.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.profile.api_key:
            headers["authorization"] = f"Bearer {self.profile.api_key.get_secret_value()}"
        return headers

    async def complete(
        self,
        messages: list[RenderedMessage],
        tools: list[ToolSpec],
        step: int = 0,
        on_delta: DeltaSink | None = None,
    ) -> ProviderReply:
        names = {t.name for t in tools}

        async def read(response: httpx.Response, streamed: bool) -> ProviderReply:
            if streamed:
                reply = await self._read_stream(response, step, on_delta)
            else:
                reply = self._parse(await response.aread(), step)
            return _calls_from_text(reply, names, step)

        url = f"{self.profile.base_url}/chat/completions"
        body = self.encoded_body(messages, tools)
        return await self.exchange(url, body, self._headers(), read)

    def _parse(self, content: bytes, step: int) -> ProviderReply:
        try:
            parsed = _Response.model_validate_json(content)
            choice = parsed.choices[0]
        except (ValidationError, IndexError) as exc:
            raise malformed(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        usage = parsed.usage or _Usage()
        message = choice.message
        calls = [
            _call(c.id or f"call_{step}_{i}", c.function.name, c.function.arguments)
            for i, c in enumerate(message.tool_calls or [])
        ]
        return _finish(
            ProviderReply(
                text=message.content or "",
                reasoning=message.reasoning_content or message.reasoning,
                tool_calls=calls,
                usage=Usage(
                    input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens
                ),
                stop_reason=choice.finish_reason or "stop",
                model=parsed.model or self.profile.model,
            )
        )

    async def _read_stream(
        self, response: httpx.Response, step: int, on_delta: DeltaSink | None
    ) -> ProviderReply:
        acc = _StreamState(model=self.profile.model)
        done = False
        async for event in EventSource(response).aiter_sse():
            # read on to the body's end (after [DONE], the chunked terminator): a body left
            # unread closes the connection instead of returning it to the pool, and a new one
            # costs the next call a TCP and TLS handshake
            if done:
                continue
            if event.data.strip() == "[DONE]":
                done = True
                continue
            try:
                chunk = json.loads(event.data)
            except json.JSONDecodeError:
                raise malformed(f"a stream chunk is not JSON: {event.data[:80]!r}") from None
            if not isinstance(chunk, dict):
                raise malformed("a stream chunk is not an object")
            if "error" in chunk:
                raise _stream_error(chunk["error"], self.secrets)
            acc.fold(chunk, on_delta)
        if acc.finish is None or not done:
            raise stream_cut("no finish reason" if acc.finish is None else "no [DONE] marker")
        return _finish(acc.reply(step))


@dataclass
class _StreamState:
    """What the chunks of a streamed chat completion add up to."""

    model: str
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)

    def fold(self, chunk: dict[str, Any], on_delta: DeltaSink | None) -> None:
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            u = chunk["usage"]
            self.usage = Usage(
                input_tokens=int(u.get("prompt_tokens") or 0),
                output_tokens=int(u.get("completion_tokens") or 0),
            )
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                if on_delta:
                    on_delta(delta["content"])
            piece = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(piece, str):
                self.reasoning.append(piece)
            for tc in delta.get("tool_calls") or []:
                empty = {"id": "", "name": "", "args": ""}
                slot = self.calls.setdefault(int(tc.get("index", 0)), empty)
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["args"] += fn.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish

    def reply(self, step: int) -> ProviderReply:
        calls = [
            _call(c["id"] or f"call_{step}_{i}", c["name"], c["args"])
            for i, c in sorted(self.calls.items())
        ]
        return ProviderReply(
            text="".join(self.text),
            reasoning="".join(self.reasoning) or None,
            tool_calls=calls,
            usage=self.usage,
            stop_reason=self.finish or "stop",
            model=self.model,
        )


def _call(call_id: str, name: str, arguments: str | dict[str, Any] | None) -> WireToolCall:
    if arguments is None:
        raw = "{}"
    elif isinstance(arguments, str):
        raw = arguments
    else:
        raw = json.dumps(arguments)
    fixed, repaired = repair_arguments(raw)
    return WireToolCall(id=call_id, name=name, arguments=fixed, repaired=repaired)


def _calls_from_text(reply: ProviderReply, names: set[str], step: int) -> ProviderReply:
    """A reply with no structured call whose whole text is one call of an offered tool."""
    if reply.tool_calls or not names:
        return reply
    call = structured_call(reply.text, names, step)
    if call is None:
        return reply
    return reply.model_copy(update={"text": "", "tool_calls": [call], "stop_reason": "tool_calls"})


def _finish(reply: ProviderReply) -> ProviderReply:
    """Stop reasons that are failures rather than replies."""
    if reply.stop_reason == "content_filter":
        raise ApplicationError(
            "the provider's content filter stopped the reply",
            type=ModelErrorKind.CONTENT_FILTERED,
            non_retryable=True,
        )
    return reply


def _stream_error(error: Any, secrets: tuple[str, ...]) -> ApplicationError:
    detail = scrub(json.dumps(error), secrets)
    if "context_length" in detail or "maximum context" in detail:
        return context_overflow(detail)
    return ApplicationError(
        f"the provider reported an error mid-stream: {detail}", type=ModelErrorKind.SERVER_ERROR
    )

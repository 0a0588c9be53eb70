"""OpenAI-compatible chat completions over httpx (OpenAI, vLLM, Ollama, llama.cpp, ...).

One method: `complete(messages, tools) -> ProviderReply`. No SDK and no httpx retries: a failure
raises an `ApplicationError` whose type tells Temporal whether to retry.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from activities.providers.errors import error_for_response, error_for_transport, scrub
from activities.providers.profiles import Profile
from capstan.messages import Usage
from capstan.tooling import ToolSpec

__all__ = ["OpenAIChat", "ProviderReply", "WireToolCall"]


class WireToolCall(BaseModel):
    id: str
    name: str
    arguments: str


class ProviderReply(BaseModel):
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[WireToolCall] = []
    usage: Usage = Usage()
    stop_reason: str = "stop"
    model: str = ""


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    reasoning_content: str | None = None
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


class OpenAIChat:
    """Adapter for `POST {base_url}/chat/completions`."""

    def __init__(self, profile: Profile, http: httpx.AsyncClient) -> None:
        self.profile = profile
        self.http = http

    @property
    def _secrets(self) -> tuple[str, ...]:
        key = self.profile.api_key
        return (key.get_secret_value(),) if key else ()

    def _body(self, messages: list[dict[str, Any]], tools: list[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.profile.model, "messages": messages}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
            body["tool_choice"] = "auto"
        return body

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec], step: int = 0
    ) -> ProviderReply:
        headers = {"content-type": "application/json"}
        if self.profile.api_key:
            headers["authorization"] = f"Bearer {self.profile.api_key.get_secret_value()}"
        url = f"{self.profile.base_url}/chat/completions"
        try:
            response = await self.http.post(
                url,
                json=self._body(messages, tools),
                headers=headers,
                timeout=self.profile.request_timeout,
            )
        except httpx.TransportError as exc:
            raise error_for_transport(exc, self._secrets) from None
        if response.status_code >= 400:
            raise error_for_response(response, self._secrets)
        return self._parse(response, step)

    def _parse(self, response: httpx.Response, step: int) -> ProviderReply:
        try:
            parsed = _Response.model_validate_json(response.content)
            choice = parsed.choices[0]
        except (ValidationError, IndexError) as exc:
            detail = scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise ApplicationError(
                f"model provider sent a malformed chat completion: {detail}",
                type="ModelResponseInvalid",
            ) from None
        calls = [
            WireToolCall(
                id=c.id or f"call_{step}_{i}",
                name=c.function.name,
                arguments=_arguments_text(c.function.arguments),
            )
            for i, c in enumerate(choice.message.tool_calls or [])
        ]
        usage = parsed.usage or _Usage()
        return ProviderReply(
            text=choice.message.content or "",
            reasoning=choice.message.reasoning_content,
            tool_calls=calls,
            usage=Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens),
            stop_reason=choice.finish_reason or "stop",
            model=parsed.model or self.profile.model,
        )


def _arguments_text(arguments: str | dict[str, Any] | None) -> str:
    if arguments is None:
        return "{}"
    return arguments if isinstance(arguments, str) else json.dumps(arguments)

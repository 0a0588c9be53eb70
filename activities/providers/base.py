"""What every provider adapter shares: the resolved input, the reply, the streaming callback.

An adapter turns `RenderedMessage`s (refs already resolved, observations budgeted and fenced)
into its wire format, sends them with httpx, and returns a `ProviderReply`. It never retries:
failures are `ApplicationError`s whose type tells Temporal whether to retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel

from capstan.core.messages import Role, Usage
from capstan.core.tooling import ToolSpec

__all__ = [
    "ChatAdapter",
    "DeltaSink",
    "ProviderReply",
    "RenderedCall",
    "RenderedMessage",
    "WireToolCall",
]

#: Called with each text delta while a reply streams in.
DeltaSink = Callable[[str], None]


@dataclass(frozen=True)
class RenderedCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class RenderedMessage:
    """A message with every ref resolved, ready for a wire format."""

    role: Role
    content: str
    tool_calls: tuple[RenderedCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    reasoning: str | None = None
    reasoning_signature: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


class WireToolCall(BaseModel):
    id: str
    name: str
    arguments: str
    repaired: bool = False


class ProviderReply(BaseModel):
    text: str = ""
    reasoning: str | None = None
    reasoning_signature: str | None = None
    tool_calls: list[WireToolCall] = []
    usage: Usage = Usage()
    stop_reason: str = "stop"
    model: str = ""
    #: the provider's tokens-per-minute budget left and its reset, where its headers state them
    #: (`capstan.activities.providers.token_budget`)
    tokens_remaining: int | None = None
    tokens_reset: float | None = None


class ChatAdapter(Protocol):
    """One model provider's chat API."""

    async def complete(
        self,
        messages: list[RenderedMessage],
        tools: list[ToolSpec],
        step: int,
        on_delta: DeltaSink | None = None,
    ) -> ProviderReply: ...

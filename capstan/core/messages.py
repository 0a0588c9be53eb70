"""Conversation messages, tool calls and usage: the vocabulary shared by loop and activities.

A message's content is `Text`: inline when small, a `BlobRef` when large. Pure types only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from capstan.core.content import Text

__all__ = ["Message", "Role", "ToolCall", "Usage"]

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One tool call requested by the model. `arguments` is the raw JSON text (or a ref to it)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: Text = "{}"


class Message(BaseModel):
    """One chat message in provider-neutral form.

    `origin` says who put it there, so transcripts and audits can tell a user's task from a
    corrective nudge or a live message.
    """

    model_config = ConfigDict(frozen=True)

    role: Role
    content: Text = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: Text | None = None
    origin: Literal["task", "system", "model", "tool", "nudge", "live"] = "task"
    step: int = 0
    untrusted: bool = False
    source_id: str | None = None
    note: str | None = None
    reasoning_signature: str | None = None


class Usage(BaseModel):
    """Token usage reported by the provider, summed over a run."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
        )

"""Replies in the providers' wire formats, as the fake provider sends them: OpenAI chat
completions and Anthropic messages, each as one JSON body or as a list of SSE events."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Turn", "anthropic_events", "anthropic_message", "openai_chunks", "openai_completion"]

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Turn:
    """One scripted reply, whatever the format."""

    step: int
    model: str
    content: str = ""
    calls: list[Call] = field(default_factory=list)
    reasoning: str = ""
    stop: str | None = None
    input_tokens: int = 0


def _fields(t: Turn) -> tuple[int, str, str, list[Call], str, str | None]:
    return t.step, t.model, t.content, t.calls, t.reasoning, t.stop


def openai_completion(t: Turn) -> dict[str, Any]:
    step, model, content, calls, reasoning, stop = _fields(t)
    input_tokens = t.input_tokens
    wire_calls = [
        {
            "id": f"call_{step}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if wire_calls:
        message["tool_calls"] = wire_calls
    finish = stop or ("tool_calls" if wire_calls else "stop")
    return {
        "id": f"chatcmpl-{step}",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": input_tokens, "completion_tokens": 20},
    }


def openai_chunks(t: Turn) -> list[str]:
    """`data:` payloads of a streamed completion, ending with `[DONE]`."""
    step, model, content, calls, reasoning, stop = _fields(t)
    input_tokens = t.input_tokens

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps(
            {
                "id": f"chatcmpl-{step}",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    out = [chunk({"role": "assistant"})]
    if reasoning:
        out.append(chunk({"reasoning_content": reasoning}))
    for i in range(0, len(content), 8):
        out.append(chunk({"content": content[i : i + 8]}))
    for i, (name, args) in enumerate(calls):
        text = json.dumps(args)
        half = len(text) // 2
        first = {
            "index": i,
            "id": f"call_{step}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": text[:half]},
        }
        out.append(chunk({"tool_calls": [first]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": text[half:]}}]}))
    out.append(chunk({}, stop or ("tool_calls" if calls else "stop")))
    out.append(
        json.dumps(
            {
                "id": f"chatcmpl-{step}",
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": input_tokens, "completion_tokens": 20},
            }
        )
    )
    out.append("[DONE]")
    return out


def _anthropic_blocks(
    step: int, content: str, calls: list[Call], reasoning: str
) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": f"sig-{step}"})
    if content:
        blocks.append({"type": "text", "text": content})
    for i, (name, args) in enumerate(calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{step}_{i}", "name": name, "input": args})
    return blocks


def anthropic_message(t: Turn) -> dict[str, Any]:
    step, model, content, calls, reasoning, stop = _fields(t)
    input_tokens = t.input_tokens
    return {
        "id": f"msg_{step}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(step, content, calls, reasoning),
        "stop_reason": stop or ("tool_use" if calls else "end_turn"),
        "usage": {
            "input_tokens": max(input_tokens - 50, 0),
            "cache_read_input_tokens": 50 if step else 0,
            "cache_creation_input_tokens": 0 if step else 50,
            "output_tokens": 20,
        },
    }


def anthropic_events(t: Turn) -> list[tuple[str, str]]:
    """(event, data) pairs of a streamed message."""
    final = anthropic_message(t)
    start = dict(final, content=[], stop_reason=None)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(final["content"]):
        kind = block["type"]
        empty: dict[str, Any] = (
            {"text": ""}
            if kind == "text"
            else {"thinking": "", "signature": ""}
            if kind == "thinking"
            else {"input": {}}
        )
        events.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, **empty},
                },
            )
        )
        if kind == "text":
            for i in range(0, len(block["text"]), 8):
                delta = {"type": "text_delta", "text": block["text"][i : i + 8]}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
        elif kind == "thinking":
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    },
                )
            )
        else:
            text = json.dumps(block["input"])
            for part in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": part},
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": final["stop_reason"]},
                "usage": {"output_tokens": 20},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return [(name, json.dumps(data)) for name, data in events]

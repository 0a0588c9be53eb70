"""A user tool module as `CAPSTAN_TOOLS=tests.sample_tools` loads it: a `tools` list.

`append_line` is not idempotent by nature, so it keeps a ledger of idempotency keys: a retried
call (same `workflow_id/step/call_id`) is applied once.
"""

from __future__ import annotations

import asyncio
import hashlib

from capstan.activities.tools.registry import ToolContext, ToolFunction, tool


@tool
async def append_line(ctx: ToolContext, path: str, line: str, linger: float = 0.0) -> str:
    """Append one line to a workspace file, exactly once per call.

    Args:
        path: File relative to the workspace.
        line: The line to append.
        linger: Seconds to wait after writing before returning (lets a test kill the worker
            after the effect but before the result is recorded).
    """
    ledger = ctx.workspace / ".ledger"
    ledger.mkdir(exist_ok=True)
    mark = ledger / hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()
    if mark.exists():
        return f"already appended (key {ctx.idempotency_key})"
    with (ctx.workspace / path).open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    mark.write_text(ctx.idempotency_key)
    if linger:
        await asyncio.sleep(linger)
    return f"appended to {path}"


@tool(read_only=True)
async def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: What to shout.
    """
    return text.upper()


@tool(read_only=True)
async def explode(reason: str = "boom") -> str:
    """Always raise, to test that a tool's exception becomes an observation.

    Args:
        reason: The message of the exception.
    """
    raise RuntimeError(reason)


tools: list[ToolFunction] = [append_line, shout, explode]


@tool(read_only=True)
async def big_output(size: int = 20_000, seed: int = 0) -> str:
    """Return `size` bytes of distinct text (a large tool result).

    Args:
        size: How many bytes to return.
        seed: Makes the output differ between calls.
    """
    line = f"row {seed:06d} " + "x" * 50 + "\n"
    return (line * (size // len(line) + 1))[:size]


tools.append(big_output)


@tool(read_only=True, sensitive=True)
async def read_secrets(name: str) -> str:
    """Read a (fake) secret: a sensitive-data tool for the Rule of Two.

    Args:
        name: Which secret.
    """
    return f"secret value of {name}"


tools.append(read_secrets)


@tool(read_only=True)
async def sleepy(ctx: ToolContext, seconds: float, marker: str = "sleepy.cancelled") -> str:
    """Sleep; if cancelled (through the activity's heartbeats), leave a marker file.

    Args:
        seconds: How long to sleep.
        marker: File written in the workspace when the sleep is cancelled.
    """
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (ctx.workspace / marker).write_text(ctx.idempotency_key)
        raise
    return "slept"


tools.append(sleepy)


async def finish_guard(answer: str, run_id: str, step: int) -> str | None:
    """A worker finish guard (`CAPSTAN_FINISH_GUARD=tests.sample_tools:finish_guard`)."""
    return None if "42" in answer else f"step {step}: cite the number from the log"

"""Follow a run step by step from the client side (polling queries), until it ends.

Used by `capstan watch` and the demo. Follows continue-as-new, since queries by workflow id
always reach the newest run in the chain.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from temporalio.service import RPCError

from capstan.client import CapstanClient
from capstan.spec import RunResult
from capstan.transcript import StepView, build_transcript

__all__ = ["follow", "format_step"]


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def format_step(step: StepView) -> list[str]:
    """Human-readable lines for one step."""
    lines = [f"step {step.step}"]
    if step.thought.strip():
        lines.append(f"  thought: {_short(step.thought)}")
    for c in step.tool_calls:
        lines.append(f"  call    {c.name}({_short(c.arguments, 120)})")
        if c.observation is not None:
            lines.append(f"  result  {_short(c.observation)}")
    lines.extend(f"  {_short(n)}" for n in step.notes)
    return lines


async def follow(
    client: CapstanClient, run_id: str, poll: float = 0.3
) -> AsyncIterator[StepView | RunResult]:
    """Yield each step once it is complete (its observations are in), then the result."""
    content = client.content()
    shown = 0
    while True:
        running = await client.is_running(run_id)
        try:
            view = await client.transcript_view(run_id)
        except RPCError:
            view = None  # no worker to answer the query right now
        if view is not None:
            steps = build_transcript(content, view)
            # the newest step is complete only once the loop has moved past it
            ready = len(steps) if not running else len(steps) - (1 if view.in_flight else 0)
            for step in steps[shown:ready]:
                yield step
            shown = max(shown, ready)
        if not running:
            yield await client.result(run_id)
            return
        await asyncio.sleep(poll)

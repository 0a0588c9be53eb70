"""Follow a run step by step from the client side (polling queries), until it ends.

Used by `capstan watch` and the demo. Follows continue-as-new, since queries by workflow id
always reach the newest run in the chain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.service import RPCError

from capstan.client.runs import CapstanClient
from capstan.client.transcript import StepView, build_transcript
from capstan.core.spec import RunResult

__all__ = ["LiveText", "follow", "format_step", "watch_live"]


@dataclass(frozen=True)
class LiveText:
    """Text of a reply that is still streaming in (ephemeral: never in history)."""

    step: int
    attempt: int
    text: str


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
        if c.executed_arguments is not None:
            lines.append(f"  edited  {c.name}({_short(c.executed_arguments, 120)})  (ran with)")
        if c.observation is not None:
            lines.append(f"  result  {_short(c.observation)}")
    lines.extend(f"  {_short(n)}" for n in step.notes)
    return lines


async def watch_live(
    client: CapstanClient, run_id: str, seen: dict[tuple[int, int], int]
) -> LiveText | None:
    """New streamed text since the last poll; a new attempt of a step starts over."""
    progress = None
    with contextlib.suppress(Exception):
        progress = await client.live_text(run_id)
    if not progress:
        return None
    key = (int(progress.get("step", 0)), int(progress.get("attempt", 1)))  # type: ignore[call-overload]
    chars, tail = int(progress.get("chars", 0)), str(progress.get("tail", ""))  # type: ignore[call-overload]
    new = chars - seen.get(key, 0)
    seen[key] = chars
    if new <= 0:
        return None
    return LiveText(step=key[0], attempt=key[1], text=tail[-new:])


async def follow(
    client: CapstanClient, run_id: str, poll: float = 0.3, live: bool = False
) -> AsyncIterator[StepView | RunResult | LiveText]:
    """Yield each step once it is complete (its observations are in), then the result; with
    `live`, also the text of replies as they stream in."""
    content = client.content()
    shown = 0
    seen: dict[tuple[int, int], int] = {}
    while True:
        running = await client.is_running(run_id)
        if live and running and (text := await watch_live(client, run_id, seen)) is not None:
            yield text
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

"""Keep an activity visibly alive while it awaits something slow.

A worker that dies mid-call is noticed after the heartbeat timeout instead of the (long)
start-to-close timeout, so a run moves on in seconds. Cancellation delivered through heartbeats
cancels the awaited work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity

__all__ = ["with_heartbeat"]

T = TypeVar("T")


async def with_heartbeat(
    work: Awaitable[T], interval: float = 1.0, details: Callable[[], Any] | None = None
) -> T:
    """Await `work`, heartbeating every `interval` seconds (outside an activity: just await).

    `details()` is attached to each heartbeat: watchers read it (e.g. streamed text so far).
    """
    task = asyncio.ensure_future(work)
    if not activity.in_activity():
        return await task
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if details is None:
                activity.heartbeat()
            else:
                activity.heartbeat(details())
    except asyncio.CancelledError:
        task.cancel()
        raise

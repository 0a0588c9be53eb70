"""Waiting for a run to reach a state, from the client side (queries, bounded polling)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.service import RPCError

from capstan.client.runs import CapstanClient
from capstan.core.spec import RunStatus
from capstan.core.steering import PendingView

T = TypeVar("T")


async def wait_for(
    query: Callable[[], Awaitable[T]], ready: Callable[[T], bool], timeout: float = 30.0
) -> T:
    """Poll `query` until `ready`; a query that finds no worker yet is simply retried."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: T | None = None
    while asyncio.get_running_loop().time() <= deadline:
        try:
            last = await query()
        except RPCError:
            last = None  # no worker polling yet
        if last is not None and ready(last):
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"never reached the awaited state; last seen: {last}")


async def wait_pending(
    client: CapstanClient,
    run_id: str,
    ready: Callable[[PendingView], bool] = lambda p: bool(p.approvals),
    timeout: float = 30.0,
) -> PendingView:
    return await wait_for(lambda: client.pending(run_id), ready, timeout)


async def wait_status(
    client: CapstanClient, run_id: str, ready: Callable[[RunStatus], bool], timeout: float = 30.0
) -> RunStatus:
    return await wait_for(lambda: client.status(run_id), ready, timeout)

"""Waiting for a run to reach a state, from the client side (queries, bounded polling)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from capstan.client import CapstanClient
from capstan.spec import RunStatus
from capstan.steering import PendingView


async def wait_pending(
    client: CapstanClient,
    run_id: str,
    ready: Callable[[PendingView], bool] = lambda p: bool(p.approvals),
    timeout: float = 30.0,
) -> PendingView:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await client.pending(run_id)
        if ready(view):
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{run_id} never reached the awaited state: {view}")
        await asyncio.sleep(0.1)


async def wait_status(
    client: CapstanClient, run_id: str, ready: Callable[[RunStatus], bool], timeout: float = 30.0
) -> RunStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await client.status(run_id)
        if ready(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{run_id} never reached the awaited status: {status}")
        await asyncio.sleep(0.1)

"""Waiting for a run to reach a state, from the client side (queries, bounded polling)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio.service import RPCError

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
        try:
            view: PendingView | None = await client.pending(run_id)
        except RPCError:
            view = None  # no worker polling yet
        if view is not None and ready(view):
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{run_id} never reached the awaited state: {view}")
        await asyncio.sleep(0.1)


async def wait_status(
    client: CapstanClient, run_id: str, ready: Callable[[RunStatus], bool], timeout: float = 30.0
) -> RunStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            status: RunStatus | None = await client.status(run_id)
        except RPCError:
            status = None  # no worker polling yet
        if status is not None and ready(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{run_id} never reached the awaited status: {status}")
        await asyncio.sleep(0.1)

"""The floor: the same shape of work as an agent iteration with nothing in it.

Per iteration one no-op "model" activity, then three no-op "tool" activities in parallel, on
the same server, from a worker of its own on its own task queue. Whatever an iteration of
`AgentWorkflow` costs above this is Capstan's (its loop, its activities, its blob store); the
`BareWorkflow` baseline runs Capstan's own activities, so it hides their cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

__all__ = ["FLOOR_ACTIVITIES", "FloorWorkflow", "floor_model", "floor_tool"]


@activity.defn(name="floor_model")
async def floor_model(step: int) -> list[str]:
    return [f"{step}-a", f"{step}-b", f"{step}-c"]


@activity.defn(name="floor_tool")
async def floor_tool(call_id: str) -> str:
    return call_id


FLOOR_ACTIVITIES: list[Callable[..., Any]] = [floor_model, floor_tool]


@workflow.defn(name="FloorWorkflow")
class FloorWorkflow:
    @workflow.run
    async def run(self, iterations: int) -> int:
        timeout = timedelta(seconds=60)
        for step in range(iterations):
            calls = await workflow.execute_activity(
                floor_model, step, start_to_close_timeout=timeout
            )
            if step == iterations - 1:
                break
            await asyncio.gather(
                *(
                    workflow.execute_activity(floor_tool, c, start_to_close_timeout=timeout)
                    for c in calls
                )
            )
        return iterations

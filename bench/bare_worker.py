"""The recovery floor's worker: the Temporal SDK alone, no Capstan import.

    TEMPORAL_ADDRESS=... BENCH_TASK_QUEUE=... BENCH_MARKS=dir python bench/bare_worker.py

`ParkedFloorWorkflow` waits for a signal, then runs `floor_tick`: the floor for parked runs.
`RecoveryFloorWorkflow` runs `floor_hang` (whose first attempt writes a mark and then hangs,
heartbeating, until its worker is killed) and then `floor_tick` (which writes a mark): the time
from the kill to the tick mark is what bare Temporal needs to move a run whose worker died, with
the heartbeat timeout, first retry and sticky timeout Capstan uses.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

MARKS = Path(os.environ.get("BENCH_MARKS", "."))


@dataclass
class FloorInput:
    name: str
    heartbeat: float
    initial_retry: float


@activity.defn(name="floor_hang")
async def floor_hang(name: str) -> str:
    if activity.info().attempt > 1:
        return name
    (MARKS / f"hang-{name}").touch()
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.5)


@activity.defn(name="floor_tick")
async def floor_tick(name: str) -> str:
    (MARKS / f"tick-{name}").touch()
    return name


@workflow.defn(name="RecoveryFloorWorkflow")
class RecoveryFloorWorkflow:
    @workflow.run
    async def run(self, given: FloorInput) -> str:
        await workflow.execute_activity(
            floor_hang,
            given.name,
            start_to_close_timeout=timedelta(seconds=300),
            heartbeat_timeout=timedelta(seconds=given.heartbeat),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=given.initial_retry)),
        )
        return await workflow.execute_activity(
            floor_tick, given.name, start_to_close_timeout=timedelta(seconds=30)
        )


@workflow.defn(name="ParkedFloorWorkflow")
class ParkedFloorWorkflow:
    """Parks until `go` is signalled, then runs one activity: a bare run waiting for a person."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal(name="go")
    def go(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.wait_condition(lambda: self.released)
        return await workflow.execute_activity(
            floor_tick, name, start_to_close_timeout=timedelta(seconds=30)
        )


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    worker = Worker(
        client,
        task_queue=os.environ["BENCH_TASK_QUEUE"],
        workflows=[RecoveryFloorWorkflow, ParkedFloorWorkflow],
        activities=[floor_hang, floor_tick],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        build_id="bench-floor",
    )
    async with worker:
        print("polling", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

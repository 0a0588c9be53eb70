"""The floor's worker in a process of its own: the Temporal SDK alone, no Capstan import.

    python bench/floor_worker.py ADDRESS TASK_QUEUE

Serves `FloorWorkflow` and its no-op activities (`bench/floor_workflow.py`) with the options of
the overhead bench's in-process floor worker (`bench/run.py:_floor_worker`: the SDK's defaults
and a given build id), prints "worker polling" once it polls, and runs until terminated. In a
process of its own so that its CPU time can be read apart (`bench/active_runs.py`).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import Client
from temporalio.worker import Worker

from bench.floor_workflow import FLOOR_ACTIVITIES, FloorWorkflow


async def main(address: str, queue: str) -> None:
    client = await Client.connect(address)
    worker = Worker(
        client, task_queue=queue, workflows=[FloorWorkflow],
        activities=FLOOR_ACTIVITIES, build_id="bench-floor",
    )  # fmt: skip
    async with worker:
        print("worker polling", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

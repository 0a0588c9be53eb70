"""A worker's start, from process start to polling its task queue: `python worker.py` against
the SDK alone (`bench/bare_worker.py`), as a ratio from the same run (issue 28: ≤ 1.5x).

Both are detected the same way (the server lists a poller on the queue) and measured twice: the
wall time to polling and the CPU seconds the process used until then (the steadier figure on a
shared machine). The Capstan worker loads its whole configuration (tools module, policy,
jail probe, build id) as in production; the embedded server is started once, beforehand.

    python bench/worker_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import TaskQueueType  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bench.steady import compile_bytecode  # noqa: E402
from bench.workers import bare_worker, capstan_worker, cpu_seconds, stop  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402

#: a remote model profile (no call is made): without one the worker starts the bundled model
MODEL = {"CAPSTAN_MODEL": "openai:gpt-4o-mini", "OPENAI_API_KEY": "sk-bench"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _polled(client: Client, queue: str) -> bool:
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    return bool((await client.workflow_service.describe_task_queue(request)).pollers)


async def _start(client: Client, launch: object, queue: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) from launching a worker to the server seeing it poll."""
    started = time.monotonic()
    proc = launch()  # type: ignore[operator]
    try:
        while not await _polled(client, queue):
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {proc.returncode}")
            await asyncio.sleep(0.005)
        return time.monotonic() - started, cpu_seconds(proc.pid)
    finally:
        stop(proc)


async def worker_start(rounds: int) -> dict[str, object]:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with EmbeddedServer(data / "temporal", port=_free_port()) as server:
            client = await Client.connect(server.address)
            samples: dict[str, list[tuple[float, float]]] = {"capstan": [], "bare": []}
            for i in range(rounds + 1):  # the first round warms the page cache and bytecode
                queue = f"start-{uuid.uuid4().hex[:8]}"
                env = {"TEMPORAL_ADDRESS": server.address, "CAPSTAN_TASK_QUEUE": queue}
                settings = Settings.from_env({**os.environ, **env, "CAPSTAN_DATA_DIR": tmp})
                log = data / f"worker-{i}.log"
                ours = await _start(client, partial(capstan_worker, settings, MODEL, log), queue)
                bare_queue = f"{queue}-bare"
                marks = data / "marks"
                marks.mkdir(exist_ok=True)
                launch = partial(bare_worker, server.address, bare_queue, marks)
                bare = await _start(client, launch, bare_queue)
                if i:
                    samples["capstan"].append(ours)
                    samples["bare"].append(bare)
    wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
    return {
        "load_before": os.getloadavg()[0],
        "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "wall_ratio": round(wall["capstan"] / wall["bare"], 2),
        "cpu_ratio": round(cpu["capstan"] / cpu["bare"], 2),
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    print(json.dumps(asyncio.run(worker_start(parser.parse_args().rounds)), indent=2))


if __name__ == "__main__":
    main()

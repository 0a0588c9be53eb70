"""Crash recovery: a worker SIGKILLed mid-tool or mid-model-call, and how long until the run
moves again, against the bare floor.

Each trial starts a worker process, starts a run that hangs in an activity (a model call held
by the fake provider, or a tool that lingers after its effect), SIGKILLs the worker there and at
once starts another. Recovery is the time from the kill to the run's next model request (the
hung activity retried, its result folded, the next step asked for). The floor is the same with
the SDK alone (`bench/bare_worker.py`): one hanging activity, then a tick, under the same
heartbeat timeout, first retry and sticky timeout. Also reported: how long a Capstan worker
process takes from start to polling.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from bench.workers import bare_worker, capstan_worker, kill, polling, stop, until
from capstan.client.runs import CapstanClient
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say

__all__ = ["recovery"]

TUNING = ActivityTuning()  # the defaults are what is measured
TOOL_FIRST_RETRY = 1.0  # run_tool's first retry (not part of ActivityTuning)


async def _capstan_trial(client: CapstanClient, base: Settings, kind: str) -> float:
    settings = base.model_copy(update={"task_queue": f"rec-{uuid.uuid4().hex[:8]}"})
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    mark = settings.workspace_dir / f"{settings.task_queue}.txt"
    first = (
        say(call("list_dir"), hold=60.0)
        if kind == "model"
        else say(call("append_line", path=mark.name, line="x", linger=60.0))
    )
    script = [first, say(call("finish", answer="done"))]
    spec = RunSpec(task="recover", auto_approve=True, allowed_tools=("append_line", "list_dir"))
    log = settings.data_dir / "workers.log"
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with FakeProvider(script) as fake:
        env = {"CAPSTAN_MODEL": "openai:fake", "OPENAI_BASE_URL": fake.base_url}
        worker = capstan_worker(settings, env, log)
        run_id = await CapstanClient(client.client, settings).start_run(spec)
        if kind == "model":
            await asyncio.to_thread(fake.wait_for_step, 0)
        else:
            await until(mark.exists)
        killed = time.monotonic()
        kill(worker)
        worker = capstan_worker(settings, env, log)
        try:
            await asyncio.to_thread(fake.wait_for_step, 1)
            moved = time.monotonic() - killed
            result = await CapstanClient(client.client, settings).result(run_id)
            assert result.terminal_reason is TerminalReason.COMPLETED, result
        finally:
            stop(worker)
    return moved


async def _floor_trial(client: CapstanClient, marks: Path, kind: str) -> float:
    queue, name = f"floor-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    address = client.settings.address
    retry = TUNING.model_initial_retry if kind == "model" else TOOL_FIRST_RETRY
    heartbeat = TUNING.model_heartbeat if kind == "model" else TUNING.tool_heartbeat
    worker = bare_worker(address, queue, marks)
    given = {"name": name, "heartbeat": heartbeat, "initial_retry": retry}
    handle = await client.client.start_workflow(
        "RecoveryFloorWorkflow", given, id=f"floor-{name}", task_queue=queue
    )
    await until((marks / f"hang-{name}").exists)
    killed = time.monotonic()
    kill(worker)
    worker = bare_worker(address, queue, marks)
    try:
        await until((marks / f"tick-{name}").exists)
        moved = time.monotonic() - killed
        await handle.result()
    finally:
        stop(worker)
    return moved


async def _worker_start(base: Settings) -> float:
    """Seconds from starting a worker process to its "polling" log line."""
    settings = base.model_copy(update={"task_queue": f"start-{uuid.uuid4().hex[:8]}"})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = settings.data_dir / f"{settings.task_queue}.log"
    started = time.monotonic()
    worker = capstan_worker(settings, {"CAPSTAN_MODEL": "openai:fake"}, log)
    try:
        await polling(log)
        return time.monotonic() - started
    finally:
        stop(worker)


def _summary(values: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(values), 2), "worst_s": round(max(values), 2)}


async def recovery(client: CapstanClient, base: Settings, trials: int) -> dict[str, Any]:
    """`trials` kills of each kind, Capstan and floor alternating so noise hits both alike."""
    marks = base.data_dir / "floor-marks"
    marks.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"trials_each": trials}
    for kind in ("tool", "model"):
        capstan: list[float] = []
        floor: list[float] = []
        for _ in range(trials):
            floor.append(await _floor_trial(client, marks, kind))
            capstan.append(await _capstan_trial(client, base, kind))
        out[f"mid_{kind}"] = {
            "capstan": _summary(capstan),
            "floor": _summary(floor),
            "median_ratio": round(statistics.median(capstan) / statistics.median(floor), 3),
        }
    starts = [await _worker_start(base) for _ in range(3)]
    out["worker_start_to_polling_s_median"] = round(statistics.median(starts), 2)
    out["settings"] = {
        "model_heartbeat_s": TUNING.model_heartbeat,
        "tool_heartbeat_s": TUNING.tool_heartbeat,
        "model_first_retry_s": TUNING.model_initial_retry,
        "tool_first_retry_s": TOOL_FIRST_RETRY,
        "sticky_timeout_s": 1.0,
    }
    out["targets"] = "capstan median <= 5 s, worst <= 6 s"
    return out

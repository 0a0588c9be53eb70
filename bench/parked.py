"""Parked runs: many runs waiting for approval on one worker, and what they cost it.

`runs` runs each take `steps_before` read-only steps (`--parked-steps`, default 0), then ask to
run a tool that needs approval and wait; the worker process's resident memory is read before
and after they park, and again once the worker has been idle for `CAPSTAN_IDLE_RELEASE` (it
gives back the token encoder: `capstan.host.memory`). With more than 1,000 runs, the first
1,000 park and are weighed once idle before the rest start, in the same worker: the growth
between the two, per run, is what each further parked run costs (two workers' figures differ
by up to ~20 MB in what their first burst of starts left in the heap). Then a sample is
approved one at a time and the time from the decision to the tool starting is measured. The
floor: the same number of bare sandboxed workflows waiting for a signal on an SDK-only worker
(`bench/bare_worker.py`), and signal -> activity on them.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.workers import bare_worker, capstan_worker, polling, rss_bytes, stop, until
from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec
from capstan.core.steering import ApprovalRequest
from capstan.host.memory import check_interval
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Reply, call, say

__all__ = ["parked"]

MB = 1024 * 1024
#: with more runs than this, the first BASE park and are weighed before the rest start
BASE = 1000
#: seconds from the last model call until the worker has given idle memory back, and a margin
_IDLE_RELEASE = float(Settings.model_fields["idle_release"].default)
IDLE_WAIT = _IDLE_RELEASE + check_interval(_IDLE_RELEASE) + 5


def _script(steps_before: int) -> Callable[[int, list[dict[str, Any]]], Reply]:
    """Each run takes `steps_before` read-only steps, then asks to append a line, then ends."""

    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        task = next(str(m["content"]) for m in messages if m["role"] == "user")
        if step < steps_before:
            return say(call("read_file", path=f"{task.split()[-1]}-{step}.txt"))
        if step == steps_before:
            return say(call("append_line", path=f"{task.split()[-1]}.txt", line="approved"))
        return say(call("finish", answer="done"))

    return script


async def _gather_limited(jobs: list[Any], limit: int = 20) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


async def _settled(pid: int) -> int:
    """RSS once it stops moving (the worker finishes its last activations)."""
    last = rss_bytes(pid)
    for _ in range(20):
        await asyncio.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) < MB // 2:
            return now
        last = now
    return last


async def _capstan(
    client: CapstanClient,
    base: Settings,
    runs: int,
    sample: int,
    steps_before: int,
    *,
    first_stage: int = BASE,
) -> dict[str, Any]:
    settings = base.model_copy(update={"task_queue": f"park-{uuid.uuid4().hex[:8]}"})
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    own = CapstanClient(client.client, settings)
    with FakeProvider(_script(steps_before)) as fake:
        env = {"CAPSTAN_MODEL": "openai:fake", "OPENAI_BASE_URL": fake.base_url}
        log = settings.data_dir / f"{settings.task_queue}.log"
        worker = capstan_worker(settings, env, log)
        try:
            await polling(log)
            # warm up: a few runs through the whole path (lazy imports, caches, arenas)
            warm = await _start(own, settings.task_queue, "warm", 5)
            await until(lambda: len(fake.requests) >= 5 * (steps_before + 1), 120)
            for i, request in enumerate(await _gather_limited([_parked(own, r) for r in warm])):
                path = settings.workspace_dir / f"{settings.task_queue}-warm{i}.txt"
                await _approve(own, request, path)
            idle = await _settled(worker.pid)
            # the first stage's runs, then the rest in the same worker: the growth between the
            # two is what each further parked run costs, apart from what the first burst left
            stages = [min(runs, first_stage), *([runs - first_stage] if runs > first_stage else [])]
            requests: list[tuple[str, ApprovalRequest]] = []
            at_base = 0
            for stage, count in enumerate(stages):
                ids = await _start(own, settings.task_queue, "", count, first=len(requests))
                asked = (len(requests) + count + 5) * (steps_before + 1) + 5

                def all_asked(n: int = asked) -> bool:
                    return len(fake.requests) >= n

                # ~5-8 runs a second start and ask on 2 shared cores: 10,000 take ~25 minutes
                await until(all_asked, max(600.0, count / 5))
                requests += await _gather_limited([_parked(own, r) for r in ids])
                full = await _settled(worker.pid)
                # a worker whose runs all wait for people is idle: what it holds after a while
                await asyncio.sleep(IDLE_WAIT)
                released = await _settled(worker.pid)
                if stage == 0:
                    at_base = released
            # the oldest runs (evicted when the cache holds fewer than `runs`), then the newest
            # (the cache is least-recently-used: these are the ones it holds)
            latencies = await _approve_each(own, settings, requests, range(sample))
            newest = range(runs - sample, runs) if runs >= 2 * sample else range(0)
            cached = await _approve_each(own, settings, requests, newest)
        finally:
            stop(worker)
    return {
        "idle_rss": idle,
        "parked_rss": full,
        "released_rss": released,
        "released_rss_at_base": at_base,
        "latencies": latencies,
        "cached": cached,
    }


async def _approve_each(
    client: CapstanClient, settings: Settings, requests: list[Any], which: range
) -> list[float]:
    """Approve `requests[i]` for each i in `which`, one at a time (run i writes `<queue>-i`)."""
    latencies = []
    for i in which:
        request = requests[i]
        effect = settings.workspace_dir / f"{settings.task_queue}-{i}.txt"
        latencies.append(await _approve(client, request, effect))
        # the run goes on (a model call, the finish): let it end before the next sample, so
        # each decision meets an idle worker, as the floor's do (their runs end at once)
        await client.result(request[0])
    return latencies


async def _start(
    client: CapstanClient, queue: str, label: str, count: int, first: int = 0
) -> list[str]:
    """Start runs `first`..`first + count - 1`: run i appends to `<queue>-<label>i.txt`."""
    specs = [
        RunSpec(task=f"park {queue}-{label}{i}", allowed_tools=("append_line",))
        for i in range(first, first + count)
    ]
    started: list[str] = await _gather_limited([client.start_run(s) for s in specs])
    return started


async def _parked(client: CapstanClient, run_id: str) -> tuple[str, ApprovalRequest]:
    for _ in range(600):
        approvals = (await client.pending(run_id)).approvals
        if approvals:
            return run_id, approvals[0]
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{run_id} never asked for approval")


async def _approve(
    client: CapstanClient, parked: tuple[str, ApprovalRequest], effect: Path
) -> float:
    """Decision signal -> the tool's effect (request and hash known, as in an inbox: no query)."""
    run_id, request = parked
    started = time.monotonic()
    await client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
    await until(effect.exists, 60, every=0.002)
    return time.monotonic() - started


async def _floor(client: CapstanClient, base: Settings, runs: int, sample: int) -> dict[str, Any]:
    queue = f"park-floor-{uuid.uuid4().hex[:8]}"
    marks = base.data_dir / "parked-marks"
    marks.mkdir(parents=True, exist_ok=True)
    worker = bare_worker(client.settings.address, queue, marks)
    try:
        for i in range(5):  # warm up, as for Capstan
            name = f"{queue}-warm{i}"
            warm = await client.client.start_workflow(
                "ParkedFloorWorkflow", name, id=name, task_queue=queue
            )
            await warm.signal("go")
            await until((marks / f"tick-{name}").exists, 60)
        idle = await _settled(worker.pid)
        names = [f"{queue}-{i}" for i in range(runs)]
        handles = await _gather_limited(
            [
                client.client.start_workflow("ParkedFloorWorkflow", n, id=n, task_queue=queue)
                for n in names
            ]
        )
        await asyncio.sleep(3.0)  # each parks at its first workflow task
        full = await _settled(worker.pid)
        await asyncio.sleep(IDLE_WAIT)  # decisions come after the same idle time as Capstan's
        latencies = []
        for name, handle in list(zip(names, handles, strict=True))[:sample]:
            started = time.monotonic()
            await handle.signal("go")
            await until((marks / f"tick-{name}").exists, 60, every=0.002)
            latencies.append(time.monotonic() - started)
            await handle.result()
    finally:
        stop(worker)
    return {"idle_rss": idle, "parked_rss": full, "latencies": latencies}


def _report(found: dict[str, Any], runs: int, first_stage: int = BASE) -> dict[str, Any]:
    report = {
        "idle_rss_mb": round(found["idle_rss"] / MB, 1),
        "parked_rss_mb": round(found["parked_rss"] / MB, 1),
        "kb_per_parked_run": round((found["parked_rss"] - found["idle_rss"]) / runs / 1024, 1),
        "decision_to_activity_ms_p50": round(statistics.median(found["latencies"]) * 1000, 1),
    }
    if "released_rss" in found:
        report["parked_rss_after_idle_mb"] = round(found["released_rss"] / MB, 1)
    if runs > first_stage and "released_rss_at_base" in found:
        at_base = found["released_rss_at_base"]
        report["first_stage_runs"] = first_stage
        report["parked_rss_after_idle_at_first_stage_mb"] = round(at_base / MB, 1)
        growth = (found["released_rss"] - at_base) / (runs - first_stage) / 1024
        report["kb_per_parked_run_after_first_stage_once_idle"] = round(growth, 2)
    if found.get("cached"):
        p50 = statistics.median(found["cached"]) * 1000
        report["decision_to_activity_ms_p50_newest"] = round(p50, 1)
    return report


async def parked(
    client: CapstanClient,
    base: Settings,
    runs: int,
    sample: int = 20,
    steps_before: int = 0,
    *,
    first_stage: int = BASE,
) -> dict[str, Any]:
    """See the module docstring; `first_stage`: how many runs park before the rest (BASE)."""
    found = await _capstan(client, base, runs, sample, steps_before, first_stage=first_stage)
    capstan = _report(found, runs, first_stage)
    floor = _report(await _floor(client, base, runs, sample), runs)
    return {
        "runs": runs,
        "steps_before_asking": steps_before,
        "capstan": capstan,
        "floor": floor,
        "capstan_rss_at_1000_runs_mb": round(
            capstan["idle_rss_mb"] + capstan["kb_per_parked_run"] * 1000 / 1024, 1
        ),
        # the same, once the worker has been idle (`IDLE_WAIT` seconds after the last call)
        "capstan_rss_at_1000_runs_after_idle_mb": round(
            capstan["parked_rss_after_idle_mb"]
            + capstan["kb_per_parked_run"] * (1000 - runs) / 1024,
            1,
        ),
        "approve_to_activity_ratio": round(
            capstan["decision_to_activity_ms_p50"] / floor["decision_to_activity_ms_p50"], 3
        ),
        # the newest parked runs, which the worker's cache holds
        "approve_newest_to_activity_ratio": round(
            capstan.get("decision_to_activity_ms_p50_newest", 0.0)
            / floor["decision_to_activity_ms_p50"],
            3,
        ),
        "targets": (
            "1,000 parked runs <= 150 MB worker RSS; approve ratio <= 1.5; "
            "10,000 parked runs <= 150 MB once idle, <= 2 KB a run after the first 1,000"
        ),
    }

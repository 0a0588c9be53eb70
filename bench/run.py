"""Capstan's benchmarks, as ratios against a baseline measured in the same run.

    python bench/run.py [--iterations 20] [--repeats 15] [--long-steps 5000]
                        [--recovery-trials 10] [--parked-runs 1000] [--active-runs 100]
                        [--only overhead,history,...]
                        [--out bench/results/latest.json]

1. Orchestration overhead: per-iteration time of `AgentWorkflow` (1 model call + 3 parallel
   tool calls, instant fake provider and tools) divided by that of `BareWorkflow` running the
   same activities, and by that of `FloorWorkflow` (no-op activities: the floor). Runs
   alternate so machine noise hits all alike; medians are compared.
2. History size: bytes of history per step at steps 20, 100 and 200 of a 200-step run with 20 KB
   tool outputs, and the ratio of late to early steps (flat = 1.0).
3. `call_model`'s own cost at steps 20 and 300 (`bench/call_model_cost.py`).
4. A 5,000-step run through compactions (`bench/long_run.py`).
5. Crash recovery against the bare floor (`bench/recovery.py`).
6. Parked runs: worker memory and approve -> activity against the bare floor (`bench/parked.py`).
7. 100 runs active at once on one worker: iterations/s against the floor's (`bench/active_runs.py`).

This machine is shared and noisy: read the ratios, not the seconds. The load average is recorded
before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench.active_runs import active_runs  # noqa: E402
from bench.bare_workflow import BareWorkflow  # noqa: E402
from bench.breakdown import Breakdown  # noqa: E402
from bench.call_model_cost import measure as call_model_cost  # noqa: E402
from bench.floor_workflow import FLOOR_ACTIVITIES, FloorWorkflow  # noqa: E402
from bench.long_run import long_run  # noqa: E402
from bench.parked import parked  # noqa: E402
from bench.recovery import recovery  # noqa: E402
from bench.workers import cpu_seconds  # noqa: E402
from capstan.client.runs import CapstanClient, connect_temporal  # noqa: E402
from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason  # noqa: E402
from capstan.host.config import load_worker_config  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402
from capstan.testing.fake_provider import FakeProvider, Reply, call, say  # noqa: E402
from capstan.testing.history_stats import measure_history  # noqa: E402
from capstan.worker import build_worker  # noqa: E402


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FLOOR_QUEUE = f"bench-floor-{uuid.uuid4().hex[:6]}"


async def _events(client: CapstanClient, workflow_id: str) -> list[Any]:
    return list((await client.client.get_workflow_handle(workflow_id).fetch_history()).events)


class _Meter:
    """Wall time and the CPU time of the bench process (the workers and the client) and of the
    server: CPU is what the noise of a shared machine disturbs least."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.server_cpu: list[float] = []

    @contextlib.asynccontextmanager
    async def measure(self, iterations: int, keep: bool) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        server = cpu_seconds(self.server_pid) if self.server_pid else 0.0
        yield
        if keep:
            self.wall.append((time.perf_counter() - wall) / iterations)
            self.cpu.append((time.process_time() - cpu) / iterations)
            if self.server_pid:
                self.server_cpu.append((cpu_seconds(self.server_pid) - server) / iterations)

    def ms(self, samples: list[float]) -> float:
        return round(statistics.median(samples) * 1000, 2) if samples else 0.0


async def overhead(
    client: CapstanClient, iterations: int, repeats: int, server_pid: int | None = None
) -> dict[str, Any]:
    sdk = sdk_client(client)
    capstan, bare, floor = _Meter(server_pid), _Meter(server_pid), _Meter(server_pid)
    capstan_parts, floor_parts = Breakdown(), Breakdown()
    # instant fake tools return tiny results: the fruitless breaker counts but never fires
    quiet = GuardPolicy(
        fruitless_nudge=10_000, fruitless_abort=10_000, similar_nudge=10_000, similar_abort=10_000
    )
    for i in range(repeats + 1):
        keep = i > 0  # the first round warms caches up
        floor_id = f"floor-{uuid.uuid4().hex[:8]}"
        async with floor.measure(iterations, keep):
            await sdk.execute_workflow(
                FloorWorkflow.run, iterations, id=floor_id, task_queue=FLOOR_QUEUE
            )
        async with bare.measure(iterations, keep):
            await client.client.execute_workflow(
                BareWorkflow.run,
                "bench",
                id=f"bare-{uuid.uuid4().hex[:8]}",
                task_queue=client.settings.task_queue,
            )
        spec = RunSpec(task="bench", max_steps=iterations + 1, guards=quiet)
        async with capstan.measure(iterations, keep):
            run_id = await client.start_run(spec)
            result = await client.result(run_id)
        assert result.terminal_reason is TerminalReason.COMPLETED, result
        if keep:
            capstan_parts.add(await _events(client, run_id))
            floor_parts.add(await _events(client, floor_id))
    per_run = [c / f for c, f in zip(capstan.wall, floor.wall, strict=True)]
    return {
        "iterations_per_run": iterations,
        "runs_each": repeats,
        "capstan_ms_per_iteration_median": capstan.ms(capstan.wall),
        "bare_ms_per_iteration_median": bare.ms(bare.wall),
        "floor_ms_per_iteration_median": floor.ms(floor.wall),
        "overhead_ratio": round(capstan.ms(capstan.wall) / bare.ms(bare.wall), 3),
        "target_ratio": 1.10,
        "floor_ratio": round(capstan.ms(capstan.wall) / floor.ms(floor.wall), 3),
        "floor_target_ratio": 1.25,
        "floor_ratio_spread": [round(min(per_run), 3), round(max(per_run), 3)],
        # CPU per iteration: the bench process (workers, client) and the server, medians
        "cpu_ms_per_iteration": {
            "capstan": capstan.ms(capstan.cpu),
            "bare": bare.ms(bare.cpu),
            "floor": floor.ms(floor.cpu),
        },
        "server_cpu_ms_per_iteration": {
            "capstan": capstan.ms(capstan.server_cpu),
            "bare": bare.ms(bare.server_cpu),
            "floor": floor.ms(floor.server_cpu),
        },
        "breakdown": {"capstan": capstan_parts.summary(), "floor": floor_parts.summary()},
    }


async def history(client: CapstanClient, steps: int = 200) -> dict[str, Any]:
    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if step < steps - 1:
            return say(call("big_output", size=20_000, seed=step))
        return say(call("finish", answer="done"))

    _SCRIPT["current"] = script
    run_id = await client.start_run(
        RunSpec(
            task="bench history",
            max_steps=steps,
            observation_max_chars=1000,
            guards=GuardPolicy(similar_nudge=10_000, similar_abort=10_000),
        )
    )
    result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    stats = await measure_history(client.client, run_id)
    at = {n: stats.step_bytes[n - 1] for n in (20, 100, 200) if n <= len(stats.step_bytes)}
    return {
        "steps": len(stats.step_bytes),
        "bytes_at_step": at,
        "events_per_step_median": statistics.median(stats.step_events),
        "late_to_early_ratio": round(stats.mean_bytes(180, 199) / stats.mean_bytes(10, 29), 3),
        "largest_event_bytes": stats.largest_event_bytes,
        "runs_in_chain": stats.runs,
    }


# The fake provider serves whichever script the current measurement installed here.
_SCRIPT: dict[str, Any] = {}


SECTIONS = ("overhead", "history", "call_model", "long_run", "recovery", "parked", "active")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@contextlib.contextmanager
def provider_process(iterations: int) -> Iterator[str]:
    """The fake provider in its own process (`bench/fake_server.py`): its base URL."""
    with subprocess.Popen(
        [sys.executable, "-m", "bench.fake_server", str(iterations)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            yield process.stdout.readline().strip()
        finally:
            process.stdin.close()
            process.wait(timeout=10)


def sdk_client(client: CapstanClient) -> Client:
    """The same connection with the SDK's own defaults (its data converter, no codec): the
    floor is what Temporal alone costs, so it must not run on Capstan's converter (until the
    fourth pass of issue 12 it did, and so shared its costs and its savings)."""
    return Client(client.client.service_client, namespace=client.client.namespace)


def _floor_worker(client: Client) -> Worker:
    return Worker(
        client, task_queue=FLOOR_QUEUE, workflows=[FloorWorkflow],
        activities=FLOOR_ACTIVITIES, build_id="bench-floor",
    )  # fmt: skip


async def in_process(
    args: argparse.Namespace, client: CapstanClient, settings: Settings, server_pid: int | None
) -> dict[str, Any]:
    """The sections measured with an in-process worker (and the floor's worker beside it)."""
    result: dict[str, Any] = {}

    def dispatch(step: int, messages: list[dict[str, Any]]) -> Reply:
        reply: Reply = _SCRIPT["current"](step, messages)
        return reply

    def install(script: Any) -> None:
        _SCRIPT["current"] = script

    if "overhead" in args.only:
        with provider_process(args.iterations) as url:
            env = {"CAPSTAN_MODEL": "openai:bench", "OPENAI_BASE_URL": url}
            async with (
                httpx.AsyncClient() as http,
                build_worker(
                    client.client,
                    load_worker_config(settings, env),
                    http,
                    extra_workflows=[BareWorkflow],
                ),
                _floor_worker(sdk_client(client)),
            ):
                result["overhead"] = await overhead(
                    client, args.iterations, args.repeats, server_pid
                )
    with FakeProvider(dispatch) as fake:
        env = {"CAPSTAN_MODEL": "openai:bench", "OPENAI_BASE_URL": fake.base_url}
        async with (
            httpx.AsyncClient() as http,
            build_worker(
                client.client,
                load_worker_config(settings, env),
                http,
                extra_workflows=[BareWorkflow],
            ),
        ):
            if "history" in args.only:
                result["history"] = await history(client)
            if "long_run" in args.only and args.long_steps > 0:
                result["long_run"] = await long_run(
                    client, fake, install, args.long_steps, settings.blob_dir
                )
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"load_average_before": _load()}
    if "call_model" in args.only:
        result["call_model"] = await call_model_cost()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        server = EmbeddedServer(data / "temporal", port=_free_port())
        await server.start()
        try:
            settings = Settings(
                data_dir=data / "capstan",
                temporal_address=server.address,
                task_queue=f"bench-{uuid.uuid4().hex[:6]}",
                tools_module="tests.sample_tools",
            )
            for i in range(args.iterations):  # distinct directories: no call repeats itself
                for sub in "abc":
                    (settings.workspace_dir / f"d{i}" / sub).mkdir(parents=True, exist_ok=True)
            client = CapstanClient(await connect_temporal(settings), settings)
            server_pid = server.process.pid if server.process else None
            result |= await in_process(args, client, settings, server_pid)
            if "recovery" in args.only and args.recovery_trials > 0:
                result["recovery"] = await recovery(client, settings, args.recovery_trials)
            if "parked" in args.only and args.parked_runs > 0:
                result["parked"] = await parked(
                    client, settings, args.parked_runs, steps_before=args.parked_steps
                )
            if "active" in args.only and args.active_runs > 0:
                result["active"] = await active_runs(
                    client,
                    settings,
                    server_pid,
                    runs=args.active_runs,
                    steps=args.active_steps,
                    rounds=args.active_rounds,
                )
        finally:
            server.stop()
    result["load_average_after"] = _load()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--long-steps", type=int, default=5000)
    parser.add_argument("--recovery-trials", type=int, default=10)
    parser.add_argument("--parked-runs", type=int, default=1000)
    parser.add_argument(
        "--parked-steps",
        type=int,
        default=0,
        help="read-only steps each parked run takes before it asks (its history grows with them)",
    )
    parser.add_argument("--active-runs", type=int, default=100, help="runs at once (0: skip)")
    parser.add_argument("--active-steps", type=int, default=10)
    parser.add_argument("--active-rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

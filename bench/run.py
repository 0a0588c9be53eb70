"""Capstan's benchmarks, as ratios against a baseline measured in the same run.

    python bench/run.py [--iterations 20] [--repeats 5] [--out bench/results/latest.json]

1. Orchestration overhead: per-iteration time of `AgentWorkflow` (1 model call + 3 parallel
   tool calls, instant fake provider and tools) divided by that of `BareWorkflow` running the
   same activities. Runs alternate so machine noise hits both alike; medians are compared.
2. History size: bytes of history per step at steps 20, 100 and 200 of a 200-step run with 20 KB
   tool outputs, and the ratio of late to early steps (flat = 1.0).

This machine is shared and noisy: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bare_workflow import BareWorkflow  # noqa: E402
from capstan.client.runs import CapstanClient, connect_temporal  # noqa: E402
from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason  # noqa: E402
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


def iteration_script(iterations: int) -> Any:
    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        if step < iterations - 1:
            return say(
                call("list_dir", path=f"d{step}/a"),
                call("list_dir", path=f"d{step}/b"),
                call("list_dir", path=f"d{step}/c"),
            )
        return say(call("finish", answer="done"))

    return script


async def overhead(client: CapstanClient, iterations: int, repeats: int) -> dict[str, Any]:
    capstan_times: list[float] = []
    bare_times: list[float] = []
    for i in range(repeats + 1):
        started = time.perf_counter()
        await client.client.execute_workflow(
            BareWorkflow.run,
            "bench",
            id=f"bare-{uuid.uuid4().hex[:8]}",
            task_queue=client.settings.task_queue,
        )
        bare = time.perf_counter() - started
        started = time.perf_counter()
        # instant fake tools return tiny results: the fruitless breaker counts but never fires
        quiet = GuardPolicy(
            fruitless_nudge=10_000,
            fruitless_abort=10_000,
            similar_nudge=10_000,
            similar_abort=10_000,
        )
        spec = RunSpec(task="bench", max_steps=iterations + 1, guards=quiet)
        result = await client.result(await client.start_run(spec))
        agent = time.perf_counter() - started
        assert result.terminal_reason is TerminalReason.COMPLETED, result
        if i > 0:  # the first pair warms caches up
            bare_times.append(bare / iterations)
            capstan_times.append(agent / iterations)
    ratio = statistics.median(capstan_times) / statistics.median(bare_times)
    return {
        "iterations_per_run": iterations,
        "runs_each": repeats,
        "capstan_ms_per_iteration_median": round(statistics.median(capstan_times) * 1000, 2),
        "bare_ms_per_iteration_median": round(statistics.median(bare_times) * 1000, 2),
        "overhead_ratio": round(ratio, 3),
        "target_ratio": 1.10,
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


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
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
            temporal = await connect_temporal(settings)
            client = CapstanClient(temporal, settings)

            def dispatch(step: int, messages: list[dict[str, Any]]) -> Reply:
                return _SCRIPT["current"](step, messages)

            with FakeProvider(dispatch) as fake:
                env = {"CAPSTAN_MODEL": "openai:bench", "OPENAI_BASE_URL": fake.base_url}
                async with (
                    httpx.AsyncClient() as http,
                    build_worker(temporal, settings, http, env, extra_workflows=[BareWorkflow]),
                ):
                    _SCRIPT["current"] = iteration_script(args.iterations)
                    result = {"overhead": await overhead(client, args.iterations, args.repeats)}
                    result["history"] = await history(client)
            return result
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

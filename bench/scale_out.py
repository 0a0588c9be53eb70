"""Scale-out: runs per second with 1 and with 3 worker processes on the same Temporal server.

`python bench/scale_out.py` starts its own dev server and fake provider, then, for each worker
count (alternating, `--repeats` times), starts that many `worker.py` processes on a fresh task
queue, warms them up, starts `--runs` runs at once and times them from the first start to the
last result. Each run is three model calls and three tool calls (`shout`, instant), so what is
measured is the orchestration: Temporal, the workers, the client.

What limits it is reported beside the ratio: CPU seconds used in the window by the server, the
workers and this process (the client and the fake provider), as shares of the machine's cores,
and how busy the whole machine was (other people's processes included). Writes
`bench/results/scale_out.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.workers import (  # noqa: E402
    capstan_worker,
    cpu_seconds,
    machine_cpu,
    own_server,
    polling,
    stop,
)
from capstan.client.runs import CapstanClient  # noqa: E402
from capstan.core.spec import RunSpec, TerminalReason  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.testing.fake_provider import FakeProvider, call, say  # noqa: E402

__all__ = ["scale_out"]

SCRIPT = [
    say(call("shout", text="one"), call("shout", text="two")),
    say(call("shout", text="three")),
    say(call("finish", answer="done")),
]
SPEC = RunSpec(task="scale", auto_approve=True, allowed_tools=("shout",))
WARM_UP = 6


async def _runs(client: CapstanClient, count: int) -> None:
    ids = await asyncio.gather(*(client.start_run(SPEC) for _ in range(count)))
    results = await asyncio.gather(*(client.result(run_id) for run_id in ids))
    assert all(r.terminal_reason is TerminalReason.COMPLETED for r in results), results


async def _window(
    client: CapstanClient, runs: int, server_pid: int, workers: list[int]
) -> dict[str, Any]:
    """Time `runs` runs and the CPU every party spent meanwhile."""
    parties = {"server": [server_pid], "workers": workers, "client_and_fake": [os.getpid()]}
    before = {name: sum(cpu_seconds(p) for p in pids) for name, pids in parties.items()}
    busy0, total0 = machine_cpu()
    started = time.perf_counter()
    await _runs(client, runs)
    wall = time.perf_counter() - started
    busy1, total1 = machine_cpu()
    cores = os.cpu_count() or 1
    used = {n: sum(cpu_seconds(p) for p in pids) - before[n] for n, pids in parties.items()}
    return {
        "runs_per_s": runs / wall,
        "wall_s": wall,
        # share of the machine's cores each party kept busy during the window
        "cpu_share": {name: seconds / (wall * cores) for name, seconds in used.items()},
        # load-independent: what one run costs each party, and the rate all cores would allow
        "cpu_ms_per_run": {name: 1000 * seconds / runs for name, seconds in used.items()},
        "cpu_bound_runs_per_s": runs * cores / sum(used.values()),
        "machine_busy": (busy1 - busy0) / (total1 - total0),
    }


async def _with_workers(
    client: CapstanClient, base: Settings, fake: FakeProvider, count: int, *, runs: int, pid: int
) -> dict[str, Any]:
    settings = base.model_copy(update={"task_queue": f"scale-{uuid.uuid4().hex[:8]}"})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    env = {"CAPSTAN_MODEL": "openai:fake", "OPENAI_BASE_URL": fake.base_url}
    logs = [settings.data_dir / f"{settings.task_queue}-{i}.log" for i in range(count)]
    procs = [capstan_worker(settings, env, log) for log in logs]
    try:
        await asyncio.gather(*(polling(log) for log in logs))
        scoped = CapstanClient(client.client, settings)
        await _runs(scoped, WARM_UP)
        return await _window(scoped, runs, pid, [p.pid for p in procs])
    finally:
        for proc in procs:
            stop(proc)


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    best = statistics.median(s["runs_per_s"] for s in samples)
    parties = samples[0]["cpu_share"].keys()
    return {
        "runs_per_s_median": round(best, 2),
        "runs_per_s_each": [round(s["runs_per_s"], 2) for s in samples],
        "cpu_share_median": {
            p: round(statistics.median(s["cpu_share"][p] for s in samples), 3) for p in parties
        },
        "cpu_ms_per_run_median": {
            p: round(statistics.median(s["cpu_ms_per_run"][p] for s in samples), 1) for p in parties
        },
        "cpu_bound_runs_per_s_median": round(
            statistics.median(s["cpu_bound_runs_per_s"] for s in samples), 2
        ),
        "machine_busy_median": round(statistics.median(s["machine_busy"] for s in samples), 3),
    }


async def scale_out(
    client: CapstanClient, settings: Settings, server_pid: int, runs: int, repeats: int
) -> dict[str, Any]:
    samples: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    with FakeProvider(SCRIPT) as fake:
        for _ in range(repeats):
            for count in (1, 3):  # alternating, so drifting load hits both alike
                samples[count].append(
                    await _with_workers(client, settings, fake, count, runs=runs, pid=server_pid)
                )
    one, three = _summary(samples[1]), _summary(samples[3])
    return {
        "runs": runs,
        "repeats": repeats,
        "cores": os.cpu_count(),
        "one_worker": one,
        "three_workers": three,
        "ratio_3_to_1": round(three["runs_per_s_median"] / one["runs_per_s_median"], 3),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    async with own_server(args.port) as (client, server_pid):
        result = await scale_out(client, client.settings, server_pid, args.runs, args.repeats)
    result["load_average_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="runs started at once per window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=7533, help="the bench's own Temporal server")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale_out.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

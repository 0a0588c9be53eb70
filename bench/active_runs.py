"""100 runs active at once on one worker: Capstan's throughput against the floor's.

    python bench/active_runs.py [--runs 100] [--steps 10] [--rounds 3] [--port 7392]
                                [--baseline DIR]

One Capstan worker process (`worker.py`, the fake provider of the overhead bench in a process
of its own: `bench/fake_server.py`) and one floor worker process (`bench/floor_worker.py`: the
SDK alone, `FloorWorkflow`'s no-op activities) poll their own task queues of the same server.
After a warm-up batch on each, every round starts `--runs` runs at once on one side and times
them from the first start to the last result, then does the same on the other side; the order
flips every round (agent, floor; floor, agent; ...) so that drifting load hits both alike. An
iteration is one model call and the three parallel tool calls it asks for (`list_dir`, instant),
as in the overhead bench: a run of `--steps` steps is `--steps` iterations, and so is a
`FloorWorkflow` of `--steps`.

Reported, medians over the rounds: iterations per second on each side and their ratio
(target: agent >= 0.8 x floor), the CPU seconds (user + system, from /proc) each worker process
spent per iteration, its context switches per iteration (voluntary ones are waits: a lock, the
GIL, a thread's queue), the server's and the bench process's (the client) CPU per iteration,
how busy the whole machine was, and the load average before and after. Writes
`bench/results/active_runs.json`.

`--baseline DIR` runs a third side: the worker of another checkout (`git worktree add DIR REV`,
the commit before a change) on its own task queue, in the same rounds, each side going first in
turn. On a shared host whose speed moves by 2x in an afternoon, the per-round ratio to it is the
before/after that one run can give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402

from bench.floor_workflow import FloorWorkflow  # noqa: E402
from bench.workers import (  # noqa: E402
    capstan_worker,
    context_switches,
    cpu_seconds,
    machine_cpu,
    own_server,
    polling,
    stop,
)
from capstan.client.runs import CapstanClient  # noqa: E402
from capstan.core.spec import ActivityTuning, GuardPolicy, RunSpec, TerminalReason  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402

__all__ = ["active_runs", "directories"]

TARGET = 0.8
WARM_UP = 10
# instant fake tools return tiny results: the fruitless breaker counts but never fires
QUIET = GuardPolicy(
    fruitless_nudge=10_000, fruitless_abort=10_000, similar_nudge=10_000, similar_abort=10_000
)

#: start `runs` runs at once; return the perf_counter time each result arrived
Batch = Callable[[int], Awaitable["_Times"]]


class _Times:
    def __init__(self, all_started: float, done: list[float]) -> None:
        self.all_started = all_started
        self.done = done


async def _timed(waits: list[Awaitable[Any]], all_started: float) -> _Times:
    async def one(wait: Awaitable[Any]) -> float:
        await wait
        return time.perf_counter()

    return _Times(all_started, list(await asyncio.gather(*(one(w) for w in waits))))


def _agent_batch(client: CapstanClient, steps: int, tuning: ActivityTuning | None = None) -> Batch:
    spec = RunSpec(
        task="bench", max_steps=steps + 1, guards=QUIET, tuning=tuning or ActivityTuning()
    )

    async def batch(runs: int) -> _Times:
        ids = await asyncio.gather(*(client.start_run(spec) for _ in range(runs)))
        started = time.perf_counter()

        async def completed(run_id: str) -> None:
            result = await client.result(run_id)
            assert result.terminal_reason is TerminalReason.COMPLETED, result

        return await _timed([completed(i) for i in ids], started)

    return batch


def _floor_batch(sdk: Client, queue: str, steps: int) -> Batch:
    async def batch(runs: int) -> _Times:
        handles = await asyncio.gather(
            *(
                sdk.start_workflow(
                    FloorWorkflow.run, steps, id=f"floor-{uuid.uuid4().hex[:10]}", task_queue=queue
                )
                for _ in range(runs)
            )
        )
        started = time.perf_counter()
        return await _timed([h.result() for h in handles], started)

    return batch


def directories(settings: Settings, steps: int) -> None:
    """The data directory, and the directories the bench script's `list_dir` calls list:
    distinct ones, so that no call repeats itself."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for i in range(steps):
        for sub in "abc":
            (settings.workspace_dir / f"d{i}" / sub).mkdir(parents=True, exist_ok=True)


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds of a process by thread name (/proc/<pid>/task): `event loop` is its main
    thread (async activities, the SDK's worker loop), `tokio-rt-worker` Temporal's core (Rust),
    `python` every other Python thread (the SDK's workflow-activation executor,
    `asyncio.to_thread`, the activity executor: Python does not name threads for the OS)."""
    seconds: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "event loop" if task.name == str(pid) else (task / "comm").read_text().strip()
            seconds[name] = seconds.get(name, 0.0) + cpu_seconds(pid, int(task.name))
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
    return seconds


async def _round(batch: Batch, runs: int, steps: int, pids: dict[str, int]) -> dict[str, Any]:
    """`runs` runs at once; wall time and each party's CPU over the window, per iteration."""
    iterations = runs * steps
    threads = _threads(pids["worker"])
    switches = context_switches(pids["worker"])
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    busy0, total0 = machine_cpu()
    began = time.perf_counter()
    times = await batch(runs)
    wall = time.perf_counter() - began
    busy1, total1 = machine_cpu()
    used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    threads = {n: s - threads.get(n, 0.0) for n, s in _threads(pids["worker"]).items()}
    voluntary, involuntary = (
        (after - was) / iterations
        for after, was in zip(context_switches(pids["worker"]), switches, strict=True)
    )
    return {
        "iterations_per_s": iterations / wall,
        "wall_s": wall,
        # every run was started before the first one ended: all were active at once
        "all_active_at_once": times.all_started < min(times.done),
        "starts_s": times.all_started - began,
        "cpu_ms_per_iteration": {name: 1000 * s / iterations for name, s in used.items()},
        "worker_threads_cpu_ms_per_iteration": {
            name: 1000 * s / iterations for name, s in threads.items() if s > 0
        },
        "machine_busy": (busy1 - busy0) / (total1 - total0),
        "worker_context_switches_per_iteration": {
            "voluntary": voluntary,
            "involuntary": involuntary,
        },
    }


def _median(samples: list[dict[str, Any]], *keys: str) -> float:
    values = []
    for sample in samples:
        value: Any = sample
        for key in keys:
            value = value[key]
        values.append(float(value))
    return statistics.median(values)


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    parties = samples[0]["cpu_ms_per_iteration"].keys()
    return {
        "iterations_per_s_median": round(_median(samples, "iterations_per_s"), 2),
        "iterations_per_s_each": [round(s["iterations_per_s"], 2) for s in samples],
        "cpu_ms_per_iteration_median": {
            p: round(_median(samples, "cpu_ms_per_iteration", p), 2) for p in parties
        },
        "worker_threads_cpu_ms_per_iteration_median": {
            t: round(
                statistics.median(
                    s["worker_threads_cpu_ms_per_iteration"].get(t, 0.0) for s in samples
                ),
                2,
            )
            for t in sorted({t for s in samples for t in s["worker_threads_cpu_ms_per_iteration"]})
        },
        "worker_cpu_ms_per_iteration_each": [
            round(s["cpu_ms_per_iteration"]["worker"], 2) for s in samples
        ],
        "machine_busy_median": round(_median(samples, "machine_busy"), 3),
        "worker_context_switches_per_iteration_median": {
            kind: round(_median(samples, "worker_context_switches_per_iteration", kind), 1)
            for kind in ("voluntary", "involuntary")
        },
        "starts_s_median": round(_median(samples, "starts_s"), 2),
        "all_active_at_once": all(s["all_active_at_once"] for s in samples),
    }


@contextmanager
def _provider(steps: int) -> Iterator[tuple[str, int]]:
    """The overhead bench's fake provider in its own process: its base URL and pid."""
    with subprocess.Popen(
        [sys.executable, "-m", "bench.fake_server", str(steps)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            yield process.stdout.readline().strip(), process.pid
        finally:
            process.stdin.close()
            process.wait(timeout=10)


def _sdk(client: CapstanClient) -> Client:
    """The same connection with the SDK's own data converter: the floor is Temporal alone."""
    return Client(client.client.service_client, namespace=client.client.namespace)


def _floor_worker(address: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "floor_worker.py"), address, queue],
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )


async def active_runs(
    client: CapstanClient,
    base: Settings,
    server_pid: int | None,
    *,
    runs: int = 100,
    steps: int = 10,
    rounds: int = 3,
    baseline: Path | None = None,
) -> dict[str, Any]:
    """See the module docstring. `baseline`: another checkout (an earlier commit's worktree)
    whose worker runs the same rounds as a third side, for a before/after from one run."""
    load_before = os.getloadavg()
    settings = base.model_copy(update={"task_queue": f"active-{uuid.uuid4().hex[:8]}"})
    directories(settings, steps)
    floor_queue = f"active-floor-{uuid.uuid4().hex[:8]}"
    agent_log = settings.data_dir / f"{settings.task_queue}.log"
    floor_log = settings.data_dir / f"{floor_queue}.log"
    before = settings.model_copy(update={"task_queue": f"{settings.task_queue}-baseline"})
    before_log = settings.data_dir / f"{before.task_queue}.log"
    samples: dict[str, list[dict[str, Any]]] = {"agent": [], "floor": []}
    if baseline is not None:
        samples["baseline"] = []
    with _provider(steps) as (url, provider_pid):
        # the token encoder and idle runs stay for the worker's life: an idle release while
        # the floor's round runs would make the next agent round pay for loading it again
        env = {"CAPSTAN_MODEL": "openai:bench", "OPENAI_BASE_URL": url, "CAPSTAN_IDLE_RELEASE": "0"}
        agent_proc = capstan_worker(settings, env, agent_log)
        floor_proc = _floor_worker(settings.address, floor_queue, floor_log)
        procs = [agent_proc, floor_proc]
        if baseline is not None:
            procs.append(capstan_worker(before, env, before_log, root=baseline))
        try:
            logs = [agent_log, floor_log, *([before_log] if baseline is not None else [])]
            await asyncio.gather(*map(polling, logs))
            common = {"server": server_pid} if server_pid else {}
            common["client"] = os.getpid()
            sides: dict[str, tuple[Batch, dict[str, int]]] = {
                "agent": (
                    _agent_batch(CapstanClient(client.client, settings), steps),
                    {"worker": agent_proc.pid, "provider": provider_pid, **common},
                ),
                "floor": (
                    _floor_batch(_sdk(client), floor_queue, steps),
                    {"worker": floor_proc.pid, **common},
                ),
            }
            if baseline is not None:
                sides["baseline"] = (
                    _agent_batch(CapstanClient(client.client, before), steps),
                    {"worker": procs[2].pid, "provider": provider_pid, **common},
                )
            for batch, _ in sides.values():  # imports, caches, connections, arenas
                await batch(WARM_UP)
            names = list(sides)
            for i in range(rounds):
                # every side goes first in turn: drifting load hits each alike
                order = names[i % len(names) :] + names[: i % len(names)]
                for side in order:
                    batch, pids = sides[side]
                    samples[side].append(await _round(batch, runs, steps, pids))
                    print(side, round(samples[side][-1]["iterations_per_s"], 2), file=sys.stderr)
        finally:
            for proc in procs:
                stop(proc)
    agent, floor = _summary(samples["agent"]), _summary(samples["floor"])
    per_round = [
        a["iterations_per_s"] / f["iterations_per_s"]
        for a, f in zip(samples["agent"], samples["floor"], strict=True)
    ]
    compared: dict[str, Any] = {}
    if baseline is not None:
        earlier = _summary(samples["baseline"])
        compared = {
            "baseline": {"checkout": str(baseline), **earlier},
            # this checkout's throughput over the baseline's, round by round (same minute)
            "against_baseline_each_round": [
                round(a["iterations_per_s"] / b["iterations_per_s"], 3)
                for a, b in zip(samples["agent"], samples["baseline"], strict=True)
            ],
        }
    return {
        "runs_at_once": runs,
        "steps_per_run": steps,
        "rounds": rounds,
        "cores": os.cpu_count(),
        "agent": agent,
        "floor": floor,
        "throughput_ratio": round(
            agent["iterations_per_s_median"] / floor["iterations_per_s_median"], 3
        ),
        "throughput_ratio_each_round": [round(r, 3) for r in per_round],
        "target_ratio": TARGET,
        "worker_cpu_ratio": round(
            agent["cpu_ms_per_iteration_median"]["worker"]
            / floor["cpu_ms_per_iteration_median"]["worker"],
            3,
        ),
        "load_average_before_after": [
            [round(x, 2) for x in load_before],
            [round(x, 2) for x in os.getloadavg()],
        ],
        **compared,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with own_server(args.port) as (client, server_pid):
        return await active_runs(
            client,
            client.settings,
            server_pid,
            runs=args.runs,
            steps=args.steps,
            rounds=args.rounds,
            baseline=args.baseline,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs started at once per round")
    parser.add_argument("--steps", type=int, default=10, help="iterations per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (`git worktree add DIR REV`) whose worker runs the same rounds",
    )
    parser.add_argument("--port", type=int, default=7392, help="the bench's own Temporal server")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "active_runs.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

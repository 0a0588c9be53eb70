"""Instructions a worker process executes per ReAct iteration: Capstan's and the SDK floor's.

    python bench/worker_instructions.py [--runs 10] [--steps 10] [--port 7398]

The active-runs bench (`bench/active_runs.py`) reads CPU seconds, which on this shared machine
swing by a third between runs, and by more between sessions. This one counts: each worker
(`worker.py` and `bench/floor_worker.py`, the same work as there: one model call and three
`list_dir` calls an iteration, against the overhead bench's fake provider) runs under valgrind's
callgrind on a dev server of its own. After a warm-up batch the counters are zeroed
(`callgrind_control -z`), `--runs` runs of `--steps` iterations go at once, and the counters
are dumped (`callgrind_control -d`): every thread of the process is counted, Temporal's core
included, and nothing of the server's. The same commit gives about the same count whatever the
machine does; what the count leaves out is what an instruction costs (cache misses, context
switches, the GIL passed between threads), which is why `active_runs.py` also reads seconds.

Under callgrind a process runs ~50x slower on one thread at a time, so the agent's runs get long
heartbeat timeouts. Writes `bench/results/worker_instructions.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.active_runs import (  # noqa: E402
    _agent_batch,
    _floor_batch,
    _provider,
    _sdk,
    directories,
)
from bench.steady import compile_bytecode, have_valgrind  # noqa: E402
from bench.workers import own_server, polling, stop  # noqa: E402
from capstan.client.runs import CapstanClient  # noqa: E402
from capstan.core.spec import ActivityTuning  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402

__all__ = ["worker_instructions"]

WARM_UP = 3
#: a call under callgrind takes ~50x as long: no heartbeat may time out
SLOW = ActivityTuning(model_heartbeat=300, tool_heartbeat=300)
_TOTAL = re.compile(r"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def _under_callgrind(argv: list[str], env: dict[str, str], out: Path, log: Path) -> Any:
    with log.open("ab") as sink:
        return subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=sink,
        )


def _dumped(out: Path) -> int:
    """The instruction total of the dump `callgrind_control -d` wrote next to `out`."""
    totals = [
        int(m.group(1))
        for dump in sorted(out.parent.glob(out.name + ".*"))
        if (m := _TOTAL.search(dump.read_text(errors="replace")))
    ]
    if not totals:
        raise RuntimeError(f"callgrind wrote no dump next to {out}")
    return totals[-1]


async def _callgrind_control(flag: str, pid: int) -> None:
    """`callgrind_control -z` (zero the counters) or `-d` (dump them) for process `pid`."""
    control = await asyncio.create_subprocess_exec(
        "callgrind_control", flag, str(pid), stdout=subprocess.DEVNULL
    )
    if await control.wait() != 0:
        raise RuntimeError(f"callgrind_control {flag} {pid} failed")


async def _side(
    side: str, client: CapstanClient, settings: Settings, *, url: str, runs: int, steps: int
) -> dict[str, Any]:
    data = settings.data_dir
    queue = f"instr-{side}"
    out, log = data / f"{side}.callgrind", data / f"{side}.log"
    env = {
        **os.environ,
        "CAPSTAN_MODEL": "openai:bench",
        "OPENAI_BASE_URL": url,
        "CAPSTAN_IDLE_RELEASE": "0",
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": queue,
        "CAPSTAN_DATA_DIR": str(data),
        "CAPSTAN_TOOLS": "tests.sample_tools",
        "PYTHONPATH": str(ROOT),
    }
    argv = (
        [sys.executable, str(ROOT / "worker.py")]
        if side == "agent"
        else [sys.executable, str(ROOT / "bench" / "floor_worker.py"), settings.address, queue]
    )
    worker = _under_callgrind(argv, env, out, log)
    try:
        await polling(log, timeout=900)
        own = CapstanClient(client.client, settings.model_copy(update={"task_queue": queue}))
        batch = (
            _agent_batch(own, steps, SLOW)
            if side == "agent"
            else _floor_batch(_sdk(client), queue, steps)
        )
        await batch(WARM_UP)
        await _callgrind_control("-z", worker.pid)
        await batch(runs)
        await _callgrind_control("-d", worker.pid)
        total = _dumped(out)
    finally:
        stop(worker)
    return {"instructions": total, "millions_per_iteration": round(total / (runs * steps) / 1e6, 2)}


async def worker_instructions(port: int, runs: int, steps: int) -> dict[str, Any]:
    compile_bytecode()
    async with own_server(port) as (client, _):
        settings = client.settings
        directories(settings, steps)
        with _provider(steps) as (url, _):
            agent = await _side("agent", client, settings, url=url, runs=runs, steps=steps)
            floor = await _side("floor", client, settings, url=url, runs=runs, steps=steps)
    return {
        "runs_at_once": runs,
        "steps_per_run": steps,
        "agent": agent,
        "floor": floor,
        "ratio": round(agent["instructions"] / floor["instructions"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs started at once")
    parser.add_argument("--steps", type=int, default=10, help="iterations per run")
    parser.add_argument("--port", type=int, default=7398, help="the bench's own Temporal server")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "worker_instructions.json"
    )
    args = parser.parse_args()
    if not have_valgrind():
        sys.exit("worker_instructions: needs valgrind (apt-get install valgrind)")
    result = asyncio.run(worker_instructions(args.port, args.runs, args.steps))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

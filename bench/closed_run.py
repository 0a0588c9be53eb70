"""Reading a closed run with no worker left: `capstan status`, `pending` and `audit` of a run whose
worker was killed, as ratios to the bare import every command needs (issue 28: <= 1.5x).

A run of three steps is completed by a real worker (fake provider on a real socket), then the
worker is killed (SIGKILL: the server goes on listing it as polling for a while, which is the
case that used to make `status` wait for a query timeout). Each command then runs as a user runs
it, a fresh `python -m capstan ...` process, alternating with the baseline
(`python -c "import temporalio.client, pydantic"`). Wall time (what a user waits, including
the RPCs) and CPU seconds (the steadier figure on a shared machine) are both reported; medians.
With `--instructions`, each command is also counted once under callgrind (`bench/steady.py`):
the process's own instructions, which do not move with the machine's load.

    python bench/closed_run.py [--rounds 7] [--instructions]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.steady import compile_bytecode, instructions  # noqa: E402
from bench.worker_start import _free_port  # noqa: E402
from bench.workers import capstan_worker, kill, polling  # noqa: E402
from capstan.client.runs import CapstanClient  # noqa: E402
from capstan.core.spec import RunSpec, TerminalReason  # noqa: E402
from capstan.runtime.config import Settings  # noqa: E402
from capstan.runtime.embedded import EmbeddedServer  # noqa: E402
from capstan.testing.fake_provider import FakeProvider, Reply, call, say  # noqa: E402

BARE = [sys.executable, "-c", "import temporalio.client, pydantic"]


def _script(step: int, messages: list[dict[str, Any]]) -> Reply:
    if step < 2:
        return say(call("read_file", path=f"notes-{step}.txt"))
    return say(call("finish", answer="done"))


def _measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `argv`; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def _closed_run(settings: Settings, data: Path) -> str:
    """A completed run whose worker was then killed."""
    with FakeProvider(_script) as fake:
        env = {"CAPSTAN_MODEL": "openai:fake", "OPENAI_BASE_URL": fake.base_url}
        log = data / "worker.log"
        worker = capstan_worker(settings, env, log)
        try:
            await polling(log)
            client = await CapstanClient.connect(settings)
            run_id = await client.start_run(RunSpec(task="read the notes", run_id="closed-1"))
            result = await client.result(run_id)
            if result.terminal_reason is not TerminalReason.COMPLETED:
                raise RuntimeError(f"the bench run ended {result.terminal_reason}")
        finally:
            kill(worker)
    return run_id


async def closed_run(rounds: int, count: bool = False) -> dict[str, object]:
    compile_bytecode()
    load_before = os.getloadavg()[0]
    counted: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with EmbeddedServer(data / "temporal", port=_free_port()) as server:
            queue = f"closed-{uuid.uuid4().hex[:8]}"
            env = {
                **os.environ,
                "TEMPORAL_ADDRESS": server.address,
                "CAPSTAN_TASK_QUEUE": queue,
                "CAPSTAN_DATA_DIR": tmp,
            }
            settings = Settings.from_env(env)
            run_id = await _closed_run(settings, data)
            commands = {
                "bare": BARE,
                "status": [sys.executable, "-m", "capstan", "status", run_id],
                "pending": [sys.executable, "-m", "capstan", "pending", run_id],
                "audit": [sys.executable, "-m", "capstan", "audit", run_id, "--format", "md"],
            }
            samples: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
            for i in range(rounds + 1):  # the first round warms the page cache and bytecode
                for name, argv in commands.items():
                    sample = await asyncio.to_thread(_measure, argv, env)
                    if i:
                        samples[name].append(sample)
            if count:
                for name, argv in commands.items():
                    counted[name] = await asyncio.to_thread(instructions, argv, env)
    wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
    out: dict[str, object] = {
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "wall_ratio": {k: round(v / wall["bare"], 2) for k, v in wall.items() if k != "bare"},
        "cpu_ratio": {k: round(v / cpu["bare"], 2) for k, v in cpu.items() if k != "bare"},
        "rounds": rounds,
    }
    if counted:
        out["instructions_millions"] = {k: round(v / 1e6) for k, v in counted.items()}
        out["instructions_ratio"] = {
            k: round(v / counted["bare"], 2) for k, v in counted.items() if k != "bare"
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--instructions", action="store_true", help="also count (callgrind)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(closed_run(args.rounds, args.instructions)), indent=2))


if __name__ == "__main__":
    main()

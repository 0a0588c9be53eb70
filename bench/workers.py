"""Worker processes for the benchmarks that kill or weigh one: Capstan's and the bare floor's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from capstan.client.runs import CapstanClient, connect_temporal
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer

__all__ = [
    "ROOT",
    "bare_worker",
    "capstan_worker",
    "context_switches",
    "cpu_seconds",
    "kill",
    "machine_cpu",
    "own_server",
    "polling",
    "rss_bytes",
    "stop",
    "until",
]

ROOT = Path(__file__).resolve().parents[1]


@contextlib.asynccontextmanager
async def own_server(port: int) -> AsyncIterator[tuple[CapstanClient, int]]:
    """A dev server of the bench's own on `port`, in a temporary directory, and a client whose
    settings keep Capstan's data beside it (the sample tools); yields the client and the
    server's pid. Stops the server after."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        server = EmbeddedServer(data / "temporal", port=port)
        await server.start()
        assert server.process is not None, "a server already runs on that port: pick another"
        try:
            settings = Settings(
                data_dir=data / "capstan",
                temporal_address=server.address,
                tools_module="tests.sample_tools",
            )
            yield CapstanClient(await connect_temporal(settings), settings), server.process.pid
        finally:
            server.stop()


def capstan_worker(
    settings: Settings, env: dict[str, str], log: Path, root: Path = ROOT
) -> subprocess.Popen[bytes]:
    """`worker.py` of the checkout at `root` (this one, or another commit's to compare with)."""
    full = {
        **os.environ,
        **env,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_TOOLS": "tests.sample_tools",
        "PYTHONPATH": str(root),
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(root / "worker.py")], env=full, cwd=root, stdout=out, stderr=out
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        kill(proc)


async def until(check: Callable[[], bool], timeout: float = 60.0, every: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long")
        await asyncio.sleep(every)


async def polling(log: Path, timeout: float = 60.0) -> None:
    """Until a Capstan worker writing `log` says it polls its task queue."""
    await until(lambda: log.exists() and b"worker polling" in log.read_bytes(), timeout)


def bare_worker(address: str, queue: str, marks: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "BENCH_TASK_QUEUE": queue}
    env["BENCH_MARKS"] = str(marks)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "bare_worker.py")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU time (user + system) a process has used so far: what `ps` shows as TIME, read from
    /proc at clock-tick resolution (`ps -o times` rounds to whole seconds); with `thread`, that
    thread's alone."""
    where = f"/proc/{pid}/task/{thread}" if thread is not None else f"/proc/{pid}"
    stat = Path(f"{where}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of every thread a process has now (Linux):
    a thread that waits (a lock, the GIL, a queue, IO) switches voluntarily."""
    voluntary = involuntary = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        for line in lines:
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, every process included."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks

"""The worker's allocator settings (capstan.host.memory)."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys

import pytest

from capstan.host import memory
from capstan.host.memory import tune_malloc

GLIBC = platform.libc_ver()[0] == "glibc"


def test_an_explicit_malloc_variable_wins() -> None:
    assert tune_malloc({"MALLOC_ARENA_MAX": "4"}) is False


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_glibc_takes_every_setting() -> None:
    # in a child process: the settings are process-wide
    code = "from capstan.host.memory import tune_malloc; print(tune_malloc({}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_large_blocks_go_back_to_the_system() -> None:
    """With the fixed mmap threshold freed 1 MiB blocks leave the process at once; by default
    glibc raises the threshold after the first such free, serves the next blocks from the heap
    and keeps them there when anything still in use lies above them."""
    code = """
import sys
from capstan.host.memory import tune_malloc
if sys.argv[1] == "tuned":
    tune_malloc({})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
first = bytearray(1024 * 1024)
del first  # one large block freed: glibc's default threshold moves up past its size
before = rss()
blocks, kept = [], []
for _ in range(64):
    blocks.append(bytearray(1024 * 1024))
    kept.append(bytearray(1024))  # small blocks still in use, above each large one
del blocks
print(rss() - before)
"""
    grown = {
        mode: int(
            subprocess.run(
                [sys.executable, "-c", code, mode], capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("default", "tuned")
    }
    assert grown["tuned"] < 8 * 1024 < grown["default"], grown  # KiB


async def test_idle_memory_is_released_and_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every releaser is asked each round with the idle time; a trim follows only a round in
    which one of them let go of something; cancelling stops the loop."""
    trims: list[bool] = []
    monkeypatch.setattr(memory, "trim", lambda: trims.append(True) or True)
    asked: list[tuple[str, float]] = []
    enough = asyncio.Event()
    answers = iter([False, True, False, False, False, False, False, False])

    def first(idle: float) -> bool:
        asked.append(("first", idle))
        return next(answers)

    def second(idle: float) -> bool:
        asked.append(("second", idle))
        if len(asked) >= 8:
            enough.set()
        return False

    task = asyncio.create_task(memory.release_when_idle([first, second], 30.0, every=0.01))
    await asyncio.wait_for(enough.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asked[:4] == [("first", 30.0), ("second", 30.0)] * 2  # both asked, even after a yes
    assert len(trims) == 1


def test_the_check_interval_follows_the_idle_time() -> None:
    assert memory.check_interval(60.0) == 15.0
    assert memory.check_interval(2.0) == 1.0  # not a busy loop for tiny idle times

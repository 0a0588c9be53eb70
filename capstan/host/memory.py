"""The worker process's memory: fewer malloc arenas, large blocks handed back, and what an idle
worker no longer needs given back to the system.

glibc gives each thread that allocates its own arena (up to 8 per core) and raises its
thresholds for keeping freed memory as large blocks come and go, so a worker whose Temporal core
threads, activity threads and workflow threads all allocate keeps memory it no longer uses.
Two arenas and fixed 128 KiB thresholds keep both an idle worker and one with many parked runs
smaller (the parked-runs bench's figures are in bench/README.md). The same as
`MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072 MALLOC_MMAP_THRESHOLD_=131072`, set from
inside so that every way of starting a worker gets it; a process started with any `MALLOC_*`
variable keeps its own settings.

Memory freed in the middle of an arena stays with the process until `malloc_trim` hands its
pages back. `release_when_idle` calls the worker's releasers (the token encoder's ~20 MB of
native tables, `capstan.activities.tokens`; the cached state of runs that stopped moving,
`capstan.host.run_cache`) and collects and trims when one of them let go of something.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

__all__ = [
    "SETTINGS",
    "Releaser",
    "check_interval",
    "collect_and_trim",
    "release_when_idle",
    "trim",
    "tune_malloc",
]

log = logging.getLogger(__name__)

# mallopt(3) parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: (parameter, value): the same values as the environment variables in the docstring
SETTINGS = ((_M_ARENA_MAX, 2), (_M_TRIM_THRESHOLD, 128 * 1024), (_M_MMAP_THRESHOLD, 128 * 1024))


def tune_malloc(env: Mapping[str, str]) -> bool:
    """Apply `SETTINGS` with glibc's `mallopt`; call before the process starts threads. False
    (nothing done) on another C library or when `env` sets any `MALLOC_*` variable."""
    if any(name.startswith("MALLOC_") for name in env):
        return False
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)


def trim() -> bool:
    """Hand the allocator's free pages back to the system (glibc's `malloc_trim(0)`); False on
    another C library or when there was nothing to hand back."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(malloc_trim(0))


@functools.cache
def _libc_function(name: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    library = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(library), name) if library else None
    except (OSError, AttributeError):
        return None


def check_interval(idle: float) -> float:
    """How often to ask: a quarter of `idle` (memory goes back within 1.25 x `idle`), at least
    every second."""
    return max(idle / 4, 1.0)


#: gives back what it has not used for the given seconds; true when it let go of something
Releaser = Callable[[float], bool | Awaitable[bool]]


async def release_when_idle(
    releasers: Sequence[Releaser], idle: float, *, every: float | None = None
) -> None:
    """Forever: every `every` seconds (`check_interval`), ask each releaser to let go of what it
    has not used for `idle` seconds, and when one did, collect garbage and trim. Cancel to stop.

    The collection is for what is freed as reference cycles (an evicted run's event loop and
    tasks): an idle worker allocates too little for Python's collector to run by itself, so
    without it an evicted run's memory stayed in the process."""
    every = check_interval(idle) if every is None else every
    while True:
        await asyncio.sleep(every)
        released = False
        for release in releasers:  # every releaser, not up to the first that let go
            answer = release(idle)
            released |= await answer if inspect.isawaitable(answer) else answer
        if released:
            await asyncio.to_thread(collect_and_trim)
            log.debug("gave idle memory back")


def collect_and_trim() -> None:
    """A full garbage collection, then `trim`."""
    gc.collect()
    trim()

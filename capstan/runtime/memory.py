"""The worker process's allocator settings: fewer malloc arenas, large blocks handed back.

glibc gives each thread that allocates its own arena (up to 8 per core) and raises its
thresholds for keeping freed memory as large blocks come and go, so a worker whose Temporal core
threads, activity threads and workflow threads all allocate keeps memory it no longer uses.
Measured on the parked-runs bench (`bench/parked.py`, 1,000 runs): the idle worker 131 -> 117 MB
and the parked ones 201 -> 183 MB with two arenas and fixed 128 KiB thresholds. The same as
`MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072 MALLOC_MMAP_THRESHOLD_=131072`, set from
inside so that every way of starting a worker gets it; a process started with any `MALLOC_*`
variable keeps its own settings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping

__all__ = ["SETTINGS", "tune_malloc"]

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
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)

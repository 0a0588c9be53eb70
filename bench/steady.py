"""What makes a start-up figure steady on a shared machine: compiled bytecode, and a count of
instructions instead of seconds.

- `compile_bytecode()`: a wheel installed by pip has its modules compiled; an editable checkout
  (or a shell with `PYTHONDONTWRITEBYTECODE=1`, as here) may not, and then every command
  compiles the modules it imports again, which is not what a user's install pays. The start
  benches compile Capstan's packages once before they measure.
- `instructions(argv)`: the instructions a command executes, counted by valgrind's callgrind
  (about 50x slower than running it). The same command gives the same count whatever else the
  machine is doing, so one run is a figure, where CPU seconds of the same command swing by a
  third on this shared machine. The count covers the process's own threads, not the servers it
  talks to.
"""

from __future__ import annotations

import compileall
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the packages a command or a worker imports from this checkout
PACKAGES = ("capstan", "workflows", "activities")

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def compile_bytecode() -> None:
    """Compile the checkout's packages, as installing a wheel would (quietly, once)."""
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def have_valgrind() -> bool:
    return shutil.which("valgrind") is not None


def instructions(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600
) -> int:
    """Instructions `argv` executes (callgrind's total; the command must succeed)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        cwd=ROOT,
        env=dict(env if env is not None else os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=True,
    )
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no total for {argv}: {done.stderr[-300:]}")
    return int(found.group(1))

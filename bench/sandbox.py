"""The jail's start-up cost per call: `run_shell` / `run_python` against the same program unjailed.

Each sample runs one short program (`echo ok` in bash, `print('ok')` in python3 -s) through
`run_jailed` (anonymous script file, bwrap with fresh namespaces, prlimit, the program, output
read from a pipe, the jail reaped) and, alternating with it so machine noise hits both alike,
the same interpreter on the same script from a file, through the same asyncio pipe, unjailed.
Reported: the medians, their ratio and the difference (the jail's overhead per call).

    python -m bench.sandbox [--repeats 40] [--out bench/results/sandbox.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from capstan.activities.tools.jail import NOBODY, Jail, Program, SandboxSettings, probe_jail
from capstan.activities.tools.sandbox import run_jailed
from capstan.core.spec import SandboxLimits

__all__ = ["measure"]

PROGRAMS: dict[Program, str] = {"shell": "echo ok\n", "python": "print('ok')\n"}


async def _unjailed(interpreter: list[str], script: Path) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *interpreter,
        str(script),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    out, _ = await proc.communicate()
    assert out == b"ok\n", out
    return time.perf_counter() - started


async def _jailed(jail: Jail, program: Program) -> float:
    started = time.perf_counter()
    ran = await run_jailed(jail, SandboxLimits(), program, PROGRAMS[program], key="bench", wall=30)
    assert ran.output == b"ok\n", ran
    return time.perf_counter() - started


async def measure(repeats: int, workspace: Path) -> dict[str, Any]:
    jail = probe_jail(SandboxSettings(), workspace)
    if not isinstance(jail, Jail):
        raise SystemExit(f"no jail here: {jail.reason}")
    results: dict[str, Any] = {"load_before": os.getloadavg()[0], "repeats": repeats}
    for program, source in PROGRAMS.items():
        script = workspace / f"bench-{program}"
        script.write_text(source)
        interpreter = [jail.shell] if program == "shell" else [jail.python or "python3", "-s"]
        jailed: list[float] = []
        bare: list[float] = []
        for _ in range(repeats):
            jailed.append(await _jailed(jail, program))
            bare.append(await _unjailed(interpreter, script))
        j_ms, b_ms = statistics.median(jailed) * 1000, statistics.median(bare) * 1000
        results[program] = {
            "jailed_ms": round(j_ms, 2),
            "unjailed_ms": round(b_ms, 2),
            "ratio": round(j_ms / b_ms, 2),
            "overhead_ms": round(j_ms - b_ms, 2),
        }
    results["load_after"] = os.getloadavg()[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="capstan-bench-") as root:
        Path(root).chmod(0o755)
        workspace = Path(root) / "workspace"
        workspace.mkdir()
        if os.geteuid() == 0:
            os.chown(workspace, NOBODY, NOBODY)  # a root worker jails as uid 65534
        results = asyncio.run(measure(args.repeats, workspace))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

"""What a CLI command costs before it does any work: CPU seconds (user + system, of the child
process) of `capstan --help`, `--version`, `schema steer` and `status --help`, as ratios to the
bare import every command needs anyway (`python -c "import temporalio.client, pydantic"`).

CPU time, not wall time: on a shared machine another process's load stretches the wall clock of
both sides unevenly, far less their CPU. Rounds alternate the commands so drift hits all alike;
medians are compared. Target (issue 28): every command's start <= 1.2x the bare import.

    python bench/cli_start.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> argv; "bare" is the baseline
COMMANDS: dict[str, list[str]] = {
    "bare": [sys.executable, "-c", "import temporalio.client, pydantic"],
    "help": [sys.executable, "-m", "capstan", "--help"],
    "version": [sys.executable, "-m", "capstan", "--version"],
    "schema steer": [sys.executable, "-m", "capstan", "schema", "steer"],
    # a command that talks to Temporal, up to its work: the client and the core's types
    "status --help": [sys.executable, "-m", "capstan", "status", "--help"],
}


def cpu_seconds(argv: list[str]) -> float:
    """The CPU seconds one run of `argv` took (its own and its children's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, check=True, env=dict(os.environ))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_start(rounds: int = 9) -> dict[str, object]:
    """Median CPU seconds per command and each command's ratio to the bare import."""
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache and the bytecode
        cpu_seconds(argv)
    for _ in range(rounds):
        for name, argv in COMMANDS.items():
            samples[name].append(cpu_seconds(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    bare = medians["bare"]
    return {
        "load_before": os.getloadavg()[0],
        "cpu_seconds": {k: round(v, 3) for k, v in medians.items()},
        "ratio_to_bare": {k: round(v / bare, 2) for k, v in medians.items() if k != "bare"},
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    print(json.dumps(cli_start(parser.parse_args().rounds), indent=2))


if __name__ == "__main__":
    main()

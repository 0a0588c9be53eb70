"""What a CLI command costs before it does any work: CPU seconds (user + system, of the child
process) of `capstan --help`, `--version`, `schema steer` and `status --help`, as ratios to the
bare import every command needs anyway (`python -c "import temporalio.client, pydantic"`).

CPU time, not wall time: on a shared machine another process's load stretches the wall clock of
both sides unevenly, far less their CPU. Rounds alternate the commands so drift hits all alike;
medians are compared. With `--instructions` each command is also counted once under callgrind
(`bench/steady.py`): the figure that does not move with the machine's load. `floor` is what any
command that reads a setting and one pydantic model pays: Temporal's client, pydantic-settings
and a first model. Target (issue 28): every command's start <= 1.2x the bare import.

    python bench/cli_start.py [--rounds 9] [--instructions]
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
sys.path.insert(0, str(ROOT))

from bench.steady import compile_bytecode, instructions  # noqa: E402

FLOOR = (
    "import temporalio.client, pydantic_settings\n"
    "from pydantic import BaseModel\n"
    "class First(BaseModel):\n"
    "    x: int\n"
)

#: name -> argv; "bare" is the baseline
COMMANDS: dict[str, list[str]] = {
    "bare": [sys.executable, "-c", "import temporalio.client, pydantic"],
    "floor": [sys.executable, "-c", FLOOR],
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


def cli_start(rounds: int = 9, count: bool = False) -> dict[str, object]:
    """Median CPU seconds per command and each command's ratio to the bare import (and, with
    `count`, each command's instructions and their ratio)."""
    compile_bytecode()
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache and the bytecode
        cpu_seconds(argv)
    for _ in range(rounds):
        for name, argv in COMMANDS.items():
            samples[name].append(cpu_seconds(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    bare = medians["bare"]
    out: dict[str, object] = {
        "load_before": os.getloadavg()[0],
        "cpu_seconds": {k: round(v, 3) for k, v in medians.items()},
        "ratio_to_bare": {k: round(v / bare, 2) for k, v in medians.items() if k != "bare"},
        "rounds": rounds,
    }
    if count:
        counted = {name: instructions(argv) for name, argv in COMMANDS.items()}
        out["instructions_millions"] = {k: round(v / 1e6) for k, v in counted.items()}
        out["instructions_ratio"] = {
            k: round(v / counted["bare"], 2) for k, v in counted.items() if k != "bare"
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--instructions", action="store_true", help="also count (callgrind)")
    args = parser.parse_args()
    print(json.dumps(cli_start(args.rounds, args.instructions), indent=2))


if __name__ == "__main__":
    main()

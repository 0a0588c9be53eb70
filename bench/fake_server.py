"""The overhead bench's fake provider in a process of its own: `python -m bench.fake_server N`
serves the N-iteration script (`bench.scripts.iteration_script`), prints its base URL on the first
line, and stops when its standard input closes. A real provider is remote: its CPU, and its
share of the worker's GIL, are not Capstan's overhead."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scripts import iteration_script
from capstan.testing.fake_provider import FakeProvider


def main() -> None:
    with FakeProvider(iteration_script(int(sys.argv[1]))) as fake:
        print(fake.base_url, flush=True)
        sys.stdin.read()  # until the bench closes our input (or exits)


if __name__ == "__main__":
    main()

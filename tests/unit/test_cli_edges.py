"""The `capstan` command at its edges: `--version`, and a reader that goes away early
(`capstan pending | head -1`) ends the command quietly, with no `BrokenPipeError`."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from tests.integration.helpers import ROOT


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "capstan", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"capstan {version('capstan')}"


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "capstan", "schema", "steer"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "BrokenPipe" not in err and "Traceback" not in err, err

"""Outside clients' set-up (no tests here): `capstan serve` as its own process on a real
socket, and pinned npm tools (generators, protocol clients, the MCP Inspector), each set
installed once into its own directory under `.capstan/` and reused by later runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from capstan.runtime.config import Settings
from tests.conftest import free_port
from tests.integration.helpers import ROOT

__all__ = ["npm_bin", "npm_modules", "serve_process"]


def npm_modules(kit: str, packages: Mapping[str, str]) -> Path:
    """`node_modules` holding `packages` (name -> exact version) for the kit named `kit`,
    installed when missing or when the pins changed; the test skips when npm is missing
    (`make test` installs it as root: .ci/system-deps)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (apt-get install npm; `make test` does as root)")
    into = ROOT / ".capstan" / kit
    manifest = json.dumps(
        {"name": f"capstan-{kit}", "private": True, "dependencies": dict(packages)}, indent=2
    )
    package = into / "package.json"
    installed = into / "node_modules" / ".installed"
    if not installed.exists() or not package.exists() or package.read_text() != manifest:
        into.mkdir(parents=True, exist_ok=True)
        package.write_text(manifest)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=into,
            check=True,
            timeout=600,
        )
        installed.write_text(manifest)
    return into / "node_modules"


def npm_bin(kit: str, packages: Mapping[str, str], name: str) -> Path:
    """The executable `name` of the kit (see `npm_modules`)."""
    return npm_modules(kit, packages) / ".bin" / name


@contextlib.contextmanager
def serve_process(
    settings: Settings,
    log: Path,
    env: Mapping[str, str] | None = None,
    command: tuple[str, ...] = ("serve",),
) -> Iterator[str]:
    """`capstan serve` (or another serving `command`, e.g. `mcp --http`) as its own process on
    the test's server, queue and data dir, until the block ends; its base URL once it
    answers."""
    port = free_port()
    environment = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_API_PORT": str(port),
        **(env or {}),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "capstan", *command],
            env=environment,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise RuntimeError(f"capstan {command[0]} exited: {log.read_text()[-2000:]}")
            try:
                httpx.get(base, timeout=2)  # any answer: it listens
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"capstan {command[0]} never answered: {log.read_text()[-2000:]}")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)

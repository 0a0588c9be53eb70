"""The CLI finds the project's data directory from any working directory inside the project,
and from outside it names the directory it looked in instead of creating one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.data_dir import find_project
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import ROOT, running_worker

pytestmark = pytest.mark.server


def cli_in(
    cwd: Path, settings: Settings, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`capstan ARGS` run in `cwd` with no CAPSTAN_DATA_DIR: the data directory is found."""
    full = {k: v for k, v in os.environ.items() if k != "CAPSTAN_DATA_DIR"}
    full.update(TEMPORAL_ADDRESS=settings.address, CAPSTAN_TASK_QUEUE=settings.task_queue)
    full["PYTHONPATH"] = str(ROOT)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "capstan", *args],
        env=full,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_audit_from_a_subdirectory_and_from_outside_the_project(
    temporal: Client, settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / "docs" / "notes").mkdir(parents=True)
    (project / "capstan.toml").write_text("")
    settings = settings.model_copy(update={"data_dir": project / ".capstan"})
    script = [
        say(call("write_file", path="big.txt", content="x" * 5000)),
        say(call("finish", answer="done")),
    ]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(RunSpec(task="write", auto_approve=True))
            assert (await client.result(run_id)).terminal_reason is TerminalReason.COMPLETED

    inside = await asyncio.to_thread(
        cli_in, project / "docs" / "notes", settings, "audit", run_id, "--verify"
    )
    assert inside.returncode == 0, (inside.stdout, inside.stderr)
    assert not (project / "docs" / "notes" / ".capstan").exists()

    if find_project(Path("/")) is not None:
        pytest.skip("this machine has a Capstan project at /")
    xdg = tmp_path / "xdg"
    outside = await asyncio.to_thread(
        cli_in, Path("/"), settings, "audit", run_id, "--verify", XDG_DATA_HOME=str(xdg)
    )
    assert outside.returncode == 2, (outside.stdout, outside.stderr)
    assert f"blob store not found at {xdg / 'capstan' / 'blobs'}" in outside.stderr
    assert not xdg.exists()  # a read never creates the directory

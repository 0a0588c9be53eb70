"""Crash tests: the worker is a real subprocess and is really killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from capstan.client import CapstanClient
from capstan.config import Settings
from capstan.spec import ActivityTuning, RunResult, RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from capstan.transcript import StepView, build_transcript
from tests.integration.helpers import model_env, record_history

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.2)


def start_worker(settings: Settings, fake: FakeProvider) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **model_env(fake),
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_TOOLS": "tests.sample_tools",
        "PYTHONPATH": str(ROOT),
    }
    with (settings.data_dir / "worker.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py")], env=env, cwd=ROOT, stdout=log, stderr=log
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


@dataclass
class Recovered:
    client: CapstanClient
    run_id: str
    result: RunResult
    steps: list[StepView]


async def kill_and_recover(
    temporal: Client,
    settings: Settings,
    fake: FakeProvider,
    spec: RunSpec,
    until: Callable[[CapstanClient, str], Awaitable[None]],
    history_name: str | None = None,
) -> Recovered:
    """Start a worker process and the run, SIGKILL the worker once `until` returns, start a new
    worker and wait for the run's result."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    client = CapstanClient(temporal, settings)
    first = start_worker(settings, fake)
    try:
        run_id = await client.start_run(spec)
        await until(client, run_id)
    finally:
        kill(first)
    second = start_worker(settings, fake)
    try:
        result = await asyncio.wait_for(client.result(run_id), 60)
        steps = build_transcript(client.content(), await client.transcript_view(run_id))
        if history_name:
            await record_history(client.handle(run_id), history_name)
    finally:
        second.terminate()
        second.wait(timeout=15)
    return Recovered(client, run_id, result, steps)


async def test_worker_killed_during_model_call(temporal, settings: Settings) -> None:
    script = [
        say(call("append_line", path="log.txt", line="written once")),
        say(call("shout", text="still here"), hold=30.0),  # the first attempt hangs: kill then
        say(call("finish", answer="survived")),
    ]

    async def model_call_in_flight(client: CapstanClient, run_id: str) -> None:
        await asyncio.to_thread(fake.wait_for_step, 1)

    with FakeProvider(script) as fake:
        spec = RunSpec(task="append and finish", tuning=TUNING, auto_approve=True)
        got = await kill_and_recover(
            temporal, settings, fake, spec, model_call_in_flight, "worker_killed_during_model_call"
        )
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert got.result.output == "survived"
    # same trajectory; only the killed model call was attempted twice
    assert fake.steps_seen() == [0, 1, 1, 2]
    assert (settings.workspace_dir / "log.txt").read_text() == "written once\n"
    shouted = [c.observation for s in got.steps for c in s.tool_calls if c.name == "shout"]
    assert shouted == ["STILL HERE"]


async def test_worker_killed_during_tool_applies_effect_once(temporal, settings: Settings) -> None:
    log = settings.workspace_dir / "log.txt"
    script = [
        say(call("append_line", path="log.txt", line="exactly once", linger=30.0)),
        say(call("finish", answer="done")),
    ]

    async def effect_applied(client: CapstanClient, run_id: str) -> None:
        for _ in range(400):  # the effect happened; the activity has not returned yet
            if log.exists():
                return
            await asyncio.sleep(0.05)

    with FakeProvider(script) as fake:
        spec = RunSpec(task="append", tuning=TUNING, auto_approve=True)
        got = await kill_and_recover(temporal, settings, fake, spec, effect_applied)
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert log.read_text() == "exactly once\n"
    observation = got.steps[0].tool_calls[0].observation or ""
    assert observation.startswith("already appended (key " + got.run_id + "/1/call_0_0")

"""A worker SIGKILLed while a jailed command runs: nothing of the command survives it, and the
retry on another worker runs the command again with the same idempotency key."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from capstan.core.spec import ActivityTuning, RunSpec, SandboxLimits, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import model_env
from tests.integration.scripted_agent import Agent, Live
from tests.sandbox_helpers import jail_workspace, live_with_marker, marker, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the test below

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow, needs_jail]

ROOT = Path(__file__).resolve().parents[2]
TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.2)


def start_worker(
    settings: Settings, workspace: Path, fake: FakeProvider
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **model_env(fake),
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_WORKSPACE": str(workspace),
        "PYTHONPATH": str(ROOT),
    }
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with (settings.data_dir / "worker.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py")], env=env, cwd=ROOT, stdout=log, stderr=log
        )


async def until(check: Callable[[], object], ready: bool, tries: int = 400) -> bool:
    """Poll `check()` (every 50 ms, bounded) until its truth is `ready`."""
    for _ in range(tries):
        if bool(check()) is ready:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_killed_worker_leaves_no_jailed_process_and_the_run_completes(
    agent: Agent, settings: Settings, jail_workspace: Path
) -> None:
    word = marker()
    # idempotent by design: the first attempt records that it started, a retry sees it
    command = (
        'if [ -e started ]; then echo "resumed: $(cat started) = $CAPSTAN_IDEMPOTENCY_KEY"; '
        f'else echo "$CAPSTAN_IDEMPOTENCY_KEY" > started; exec -a {word} sleep 600; fi'
    )
    script = [say(call("run_shell", command=command)), say(call("finish", answer="done"))]
    spec = RunSpec(
        task="run it",
        tuning=TUNING,
        auto_approve=True,
        allowed_tools=("run_shell",),
        sandbox=SandboxLimits(wall_seconds=600),
    )
    with FakeProvider(script) as fake:
        live = Live(agent.client, fake)
        first = start_worker(settings, jail_workspace, fake)
        try:
            run_id = await live.start(spec)
            assert await until(lambda: live_with_marker(word), True), "the command never started"
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        # the jail dies with its parent: bwrap, its PID namespace and everything in it
        assert await until(lambda: live_with_marker(word), False), live_with_marker(word)
        second = start_worker(settings, jail_workspace, fake)
        try:
            run = await live.finish(run_id, timeout=60)
        finally:
            second.terminate()
            second.wait(timeout=15)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    (observation,) = [m["content"] for m in run.messages(1, "tool")]
    key = f"{run_id}/1/call_0_0"
    assert f"resumed: {key} = {key}" in observation  # same key on the retry

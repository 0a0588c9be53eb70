"""SIGTERM drains a worker: a real worker process is terminated while a tool runs.

What a Kubernetes rollout does to a pod: readiness goes false at once, the worker stops taking
tasks, the running tool finishes and its result is recorded on attempt 1 (no retry, no second
effect), the process exits 0 within the grace period, and another worker finishes the run.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess

import httpx
import pytest
from temporalio.api.history.v1 import HistoryEvent

from capstan.core.spec import RunSpec, TerminalReason
from capstan.host.health import LIVE_PATH, READY_PATH
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.conftest import free_port
from tests.integration.scripted_agent import Agent, Live
from tests.integration.test_crash import TOOLS, TUNING, start_worker

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

LINGER = 4.0  # the tool's work after its effect: SIGTERM lands inside it


async def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(int(timeout / 0.1)):
            assert proc.poll() is None, "the worker exited before it was ready"
            try:
                if (await http.get(url + READY_PATH)).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            await asyncio.sleep(0.1)
    raise TimeoutError("the worker never became ready")


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    for _ in range(int(timeout / 0.1)):
        if (code := proc.poll()) is not None:
            return code
        await asyncio.sleep(0.1)
    proc.kill()
    raise TimeoutError("the worker did not exit within the grace period")


async def run_tool_events(live: Live, run_id: str) -> list[HistoryEvent]:
    """The history events of the run's `run_tool` activities (scheduled, started, ended)."""
    events = [e async for e in live.client.handle(run_id).fetch_history_events()]
    tool_ids = {
        e.event_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
    }
    return [e for e in events if e.event_id in tool_ids or _scheduled_id(e) in tool_ids]


def _scheduled_id(event: HistoryEvent) -> int:
    for name in ("started", "completed", "failed", "timed_out", "canceled"):
        field = f"activity_task_{name}_event_attributes"
        if event.HasField(field):  # type: ignore[arg-type]
            return int(getattr(event, field).scheduled_event_id)
    return -1


async def test_sigterm_mid_tool_lets_it_finish_once(agent: Agent, settings: Settings) -> None:
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    log = settings.workspace_dir / "log.txt"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    health_env = {"CAPSTAN_HEALTH_PORT": str(port), "CAPSTAN_HEALTH_HOST": "127.0.0.1"}
    script = [
        say(call("append_line", path="log.txt", line="once", linger=LINGER)),
        say(call("finish", answer="drained")),
    ]
    spec = RunSpec(task="append", tuning=TUNING, auto_approve=True, allowed_tools=TOOLS)
    with FakeProvider(script) as fake:
        live = Live(agent.client, fake)
        first = start_worker(settings, fake, {**health_env, "CAPSTAN_SHUTDOWN_GRACE": "20"})
        try:
            await wait_ready(url, first)
            async with httpx.AsyncClient() as http:
                assert (await http.get(url + LIVE_PATH)).json() == {"status": "ok"}
                ready = (await http.get(url + READY_PATH)).json()
                assert ready["checks"] == {"worker": "ok", "temporal": "ok", "blobs": "ok"}
                run_id = await live.start(spec)
                for _ in range(400):  # the effect happened; the tool is still lingering
                    if log.exists():
                        break
                    await asyncio.sleep(0.05)
                first.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                draining = await http.get(url + READY_PATH)
                assert first.poll() is None, "the worker quit without waiting for its tool"
                assert (draining.status_code, draining.json()["checks"]) == (
                    503,
                    {"worker": "draining"},
                )
            assert await wait_exit(first, timeout=LINGER + 15) == 0
        finally:
            if first.poll() is None:
                first.kill()
        ended = await run_tool_events(live, run_id)
        second = start_worker(settings, fake)
        try:
            got = await live.finish(run_id, timeout=60)
        finally:
            second.terminate()
            second.wait(timeout=15)
    kinds = [e.WhichOneof("attributes") for e in ended]
    assert kinds == [
        "activity_task_scheduled_event_attributes",
        "activity_task_started_event_attributes",
        "activity_task_completed_event_attributes",
    ], "the tool's result was recorded before the worker exited, on its only attempt"
    assert ended[1].activity_task_started_event_attributes.attempt == 1
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert got.result.output == "drained"
    assert log.read_text() == "once\n"
    assert got.steps[0].tool_calls[0].observation == "appended to log.txt"

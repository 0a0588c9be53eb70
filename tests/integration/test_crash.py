"""Crash tests: the worker is a real subprocess and is really killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.core.steering import PendingView
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Script, call, say
from tests.integration.helpers import model_env
from tests.integration.scripted_agent import Agent, Live, Run
from tests.integration.steer_helpers import wait_pending, wait_status

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# tests.sample_tools also has a sensitive tool; offering it with read_file and a writer would
# (rightly) trigger the Rule of Two, so these runs offer only what they use.
TOOLS = ("append_line", "shout", "list_dir")
TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.2)


def start_worker(
    settings: Settings, fake: FakeProvider | None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A worker process on the test's task queue; its model is the fake, or `extra_env`'s."""
    env = {
        **os.environ,
        **(model_env(fake) if fake is not None else {}),
        **(extra_env or {}),
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


Step = Callable[[Live, str], Awaitable[None]]


async def kill_and_recover(
    agent: Agent,
    script: Script,
    spec: RunSpec,
    until: Step,
    history_name: str | None = None,
    while_down: Step | None = None,
) -> Run:
    """Start a worker process and the run, SIGKILL the worker once `until` returns, run
    `while_down` with no worker alive, start a new worker and wait for the run's result."""
    settings = agent.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.workspace_dir.mkdir(parents=True, exist_ok=True)
    with FakeProvider(script) as fake:
        live = Live(agent.client, fake)
        first = start_worker(settings, fake)
        try:
            run_id = await live.start(spec)
            await until(live, run_id)
        finally:
            kill(first)
        if while_down is not None:
            await while_down(live, run_id)
        second = start_worker(settings, fake)
        try:
            return await live.finish(run_id, history_name, timeout=60)
        finally:
            second.terminate()
            second.wait(timeout=15)


async def test_worker_killed_during_model_call(agent: Agent, settings: Settings) -> None:
    script = [
        say(call("append_line", path="log.txt", line="written once")),
        say(call("shout", text="still here"), hold=30.0),  # the first attempt hangs: kill then
        say(call("finish", answer="survived")),
    ]

    async def model_call_in_flight(live: Live, run_id: str) -> None:
        await asyncio.to_thread(live.fake.wait_for_step, 1)

    spec = RunSpec(task="append and finish", tuning=TUNING, auto_approve=True, allowed_tools=TOOLS)
    got = await kill_and_recover(
        agent, script, spec, model_call_in_flight, "worker_killed_during_model_call"
    )
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert got.result.output == "survived"
    # same trajectory; only the killed model call was attempted twice
    assert got.fake.steps_seen() == [0, 1, 1, 2]
    assert (settings.workspace_dir / "log.txt").read_text() == "written once\n"
    shouted = [c.observation for s in got.steps for c in s.tool_calls if c.name == "shout"]
    assert shouted == ["STILL HERE"]


async def test_worker_killed_during_tool_applies_effect_once(
    agent: Agent, settings: Settings
) -> None:
    log = settings.workspace_dir / "log.txt"
    script = [
        say(call("append_line", path="log.txt", line="exactly once", linger=30.0)),
        say(call("finish", answer="done")),
    ]

    async def effect_applied(live: Live, run_id: str) -> None:
        for _ in range(400):  # the effect happened; the activity has not returned yet
            if log.exists():
                return
            await asyncio.sleep(0.05)

    spec = RunSpec(task="append", tuning=TUNING, auto_approve=True, allowed_tools=TOOLS)
    got = await kill_and_recover(agent, script, spec, effect_applied)
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert log.read_text() == "exactly once\n"
    observation = got.steps[0].tool_calls[0].observation or ""
    assert observation.startswith("already appended (key " + got.run_id + "/1/call_0_0")


async def test_worker_killed_while_waiting_for_approval(agent: Agent, settings: Settings) -> None:
    """(a) approve while no worker runs: the signal is durable, the new worker applies it once."""
    shown: list[PendingView] = []

    async def waiting(live: Live, run_id: str) -> None:
        shown.append(await wait_pending(live.client, run_id))

    async def approve_offline(live: Live, run_id: str) -> None:
        client = live.client
        # no worker runs: `pending` falls back to the requests the run announced in its memo
        offline = await client.pending(run_id, query_timeout=2.0)
        assert offline.approvals == shown[0].approvals
        await client.decide(run_id, "approve")  # the only open request, hash from the memo
        (request,) = offline.approvals
        await client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)

    script = [
        say(call("append_line", path="log.txt", line="approved")),
        say(call("finish", answer="done")),
    ]
    spec = RunSpec(task="append after approval", tuning=TUNING, allowed_tools=TOOLS)
    got = await kill_and_recover(
        agent, script, spec, waiting, "approval_across_crash", approve_offline
    )
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert (settings.workspace_dir / "log.txt").read_text() == "approved\n"
    assert [r.action for r in got.view.records] == ["approve"]
    assert len(got.view.diagnostics) == 1  # the second decision was stale: ignored, recorded


async def test_worker_killed_while_paused(agent: Agent) -> None:
    """(b) a paused run stays paused across a crash and resumes by a signal sent offline."""

    async def paused(live: Live, run_id: str) -> None:
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await live.client.pause(run_id)
        await wait_status(live.client, run_id, lambda s: s.paused and s.step == 1)

    async def resume_offline(live: Live, run_id: str) -> None:
        await live.client.send_message(run_id, "resumed by the operator", "r1")
        await live.client.resume(run_id)

    script = [say(call("list_dir"), hold=0.5), say(call("finish", answer="done"))]
    spec = RunSpec(task="pause me", tuning=TUNING, allowed_tools=TOOLS)
    got = await kill_and_recover(agent, script, spec, paused, None, resume_offline)
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert got.fake.steps_seen() == [0, 1]
    delivered = [m["content"] for m in got.messages(1, "user")][1:]
    assert delivered == ["resumed by the operator"]


async def test_worker_killed_between_message_and_delivery(agent: Agent) -> None:
    """(c) a message signalled during a model call is delivered exactly once after the crash."""

    async def message_sent(live: Live, run_id: str) -> None:
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await live.client.send_message(run_id, "use the blue one", "m1")

    script = [say(call("list_dir"), hold=30.0), say(call("finish", answer="blue"))]
    spec = RunSpec(task="listen", tuning=TUNING, allowed_tools=TOOLS)
    got = await kill_and_recover(agent, script, spec, message_sent)
    assert got.result.terminal_reason is TerminalReason.COMPLETED
    assert got.fake.steps_seen() == [0, 0, 1]
    delivered = [m["content"] for m in got.messages(-1, "user")][1:]
    assert delivered == ["use the blue one"]

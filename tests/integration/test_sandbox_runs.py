"""`run_shell` and `run_python` through the loop: approval of the exact code, limits from the
run spec, output paged through the blob store, cancellation, and a worker with no jail."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from capstan.core.spec import SandboxLimits, TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import FAST, Agent
from tests.integration.steer_helpers import wait_pending
from tests.sandbox_helpers import jail_workspace, live_with_marker, marker, needs_jail

__all__ = ["jail_workspace"]  # the fixture, imported for the tests below

pytestmark = [pytest.mark.server]

COUNT_LINES = (
    "from pathlib import Path\n"
    "files = sorted(Path('.').glob('*.csv'))\n"
    "print(sum(len(p.read_text().splitlines()) for p in files), 'lines in', len(files), 'files')\n"
)


@needs_jail
async def test_a_data_task_runs_once_a_human_approved_the_exact_code(
    agent: Agent, jail_workspace: Path
) -> None:
    (jail_workspace / "a.csv").write_text("id,x\n1,2\n2,3\n")
    (jail_workspace / "b.csv").write_text("id,x\n3,4\n4,5\n5,6\n6,7\n")
    agent.configure(workspace=jail_workspace)
    script = [say(call("run_python", code=COUNT_LINES)), say(call("finish", answer="8 lines"))]
    async with agent.serving(script) as live:
        run_id = await live.start(agent.spec(allowed_tools=("run_python",)))
        pending = await wait_pending(live.client, run_id)
        (request,) = pending.approvals  # state-changing tool: asks by default
        assert request.tool == "run_python"
        assert json.loads(str(request.arguments)) == {"code": COUNT_LINES}
        assert "changes state" in request.reason
        await live.client.decide(run_id, "approve")
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    (observation,) = [m["content"] for m in run.messages(1, "tool")]
    assert observation.startswith('<untrusted-data source="run_python">')  # fenced
    assert "exit status: 0" in observation and "8 lines in 2 files" in observation


@needs_jail
async def test_limits_come_from_the_run_spec_and_big_output_pages_from_the_blob_store(
    agent: Agent, jail_workspace: Path
) -> None:
    agent.configure(workspace=jail_workspace)
    limits = SandboxLimits(wall_seconds=1, output_bytes=300_000)
    script = [
        say(
            call("run_shell", command="sleep 30"),
            call("run_shell", command="yes 0123456789 | head -c 100000000"),
        ),
        say(call("finish", answer="done")),
    ]
    run = await agent.run(
        script, sandbox=limits, auto_approve=True, allowed_tools=("run_shell", "read_result")
    )
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    slept, printed = [m["content"] for m in run.messages(1, "tool")]
    assert "limit reached: wall_seconds (wall time: killed after 1 s)" in slept
    assert "limit reached: output_bytes" in printed
    assert "--- output (300000 bytes, cut at the limit) ---" in printed
    assert "read_result(" in printed  # the model sees a part; the rest is in the blob store
    assert len(printed) < 100_000


@needs_jail
@pytest.mark.slow
async def test_cancelling_the_run_kills_a_long_command_at_the_next_heartbeat(
    agent: Agent, jail_workspace: Path
) -> None:
    agent.configure(workspace=jail_workspace)
    word = marker()
    script = [say(call("run_shell", command=f"exec -a {word} sleep 600"))]
    tuning = FAST.model_copy(update={"tool_heartbeat": 2.0})
    async with agent.serving(script) as live:
        spec = agent.spec(
            tuning=tuning,
            auto_approve=True,
            allowed_tools=("run_shell",),
            sandbox=SandboxLimits(wall_seconds=600),
        )
        run_id = await live.start(spec)
        for _ in range(600):
            if live_with_marker(word):
                break
            await asyncio.sleep(0.05)
        assert live_with_marker(word), "the command never started"
        started = asyncio.get_running_loop().time()
        await live.client.cancel(run_id, reason="stop it")
        run = await live.finish(run_id, timeout=30)
        # heartbeats go every second: the kill follows within a heartbeat timeout or two
        for _ in range(100):
            if not live_with_marker(word):
                break
            await asyncio.sleep(0.05)
        gone_after = asyncio.get_running_loop().time() - started
    assert run.result.terminal_reason is TerminalReason.CANCELLED
    assert live_with_marker(word) == [], f"still running {gone_after:.1f} s after cancel"


async def test_without_bubblewrap_the_tools_are_not_offered_and_the_worker_says_why(
    agent: Agent, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="capstan.worker")
    script = [say(call("run_shell", command="id")), say(call("finish", answer="no shell"))]
    missing = tmp_path / "no-bwrap"
    run = await agent.run(script, env={"CAPSTAN_BWRAP": str(missing)}, auto_approve=True)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    offered = {t["function"]["name"] for t in run.requests[0]["tools"]}
    assert "read_file" in offered and not offered & {"run_shell", "run_python"}
    (observation,) = [m["content"] for m in run.messages(1, "tool")]
    assert "unknown tool 'run_shell'" in observation  # never run, jailed or not
    said = [r.getMessage() for r in caplog.records if "not offered" in r.getMessage()]
    assert said == [
        "run_shell and run_python are not offered: bubblewrap not found "
        f"(CAPSTAN_BWRAP={missing}); install it (Debian package `bubblewrap`)"
    ]

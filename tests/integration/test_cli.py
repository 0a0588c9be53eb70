"""The `capstan` command as a user runs it: a subprocess, exit codes, --json shapes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending

pytestmark = pytest.mark.server


async def test_run_wait_json_status_and_ls(agent: Agent, settings: Settings) -> None:
    async with agent.serving([say(call("list_dir")), say(call("finish", answer="cli ok"))]):
        done = await asyncio.to_thread(
            run_cli, settings, "run", "use the cli", "--id", "cli-run-1", "--wait", "--json"
        )
        status = await asyncio.to_thread(run_cli, settings, "status", "cli-run-1", "--json")
        transcript = await asyncio.to_thread(run_cli, settings, "transcript", "cli-run-1")
        listing = await asyncio.to_thread(run_cli, settings, "ls", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["terminal_reason"] == "completed" and result["output"] == "cli ok"
    assert set(result) == {
        *("run_id", "terminal_reason", "output", "error", "steps", "usage"),
        *("conversation", "tail", "context_tokens"),  # where a thread's next run goes on from
        "diagnostics",  # what `status` of the closed run shows, with no worker asked
        "output_format",  # `json`: a typed result, `output` is its JSON value
        "unread",  # live messages it never read, kept in the blob store (a thread reads them)
        "continued",  # its continue-as-new count: `status` of the closed run reads no history
    }
    assert json.loads(status.stdout)["phase"] == "finished"
    assert "call    list_dir({})" in transcript.stdout
    assert any(r["run_id"] == "cli-run-1" for r in json.loads(listing.stdout))


async def test_not_completed_run_exits_non_zero(agent: Agent, settings: Settings) -> None:
    async with agent.serving([say(call("list_dir"))]):
        done = await asyncio.to_thread(
            run_cli, settings, "run", "loop", "--max-steps", "1", "--wait"
        )
    assert done.returncode == 1
    assert "max_steps after 1 steps" in done.stdout


def test_errors_are_one_line(tmp_path: Path) -> None:
    settings = Settings(temporal_address="127.0.0.1:1", data_dir=tmp_path)
    done = run_cli(settings, "status", "nope")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "no Temporal server answers at 127.0.0.1:1" in done.stderr


async def test_steering_commands(agent: Agent, settings: Settings) -> None:
    script = [
        say(call("write_file", path="a.txt", content="x")),
        say(call("finish", answer="steered")),
    ]
    async with agent.serving(script) as live:
        run_id = await live.start(RunSpec(task="write", run_id="cli-steer"))
        await wait_pending(live.client, run_id)
        pending = await asyncio.to_thread(run_cli, settings, "pending", run_id, "--json")
        inbox = await asyncio.to_thread(run_cli, settings, "pending")
        sent = await asyncio.to_thread(run_cli, settings, "send", run_id, "hello", "--id", "m1")
        wrong = await asyncio.to_thread(
            run_cli, settings, "approve", run_id, "cli-steer/9/x", "--checked"
        )
        approved = await asyncio.to_thread(run_cli, settings, "approve", run_id, "--checked")
        result = await live.client.result(run_id)
    (view,) = json.loads(pending.stdout)
    (request,) = view["approvals"]
    assert request["request_id"] == "cli-steer/1/call_0_0" and len(request["args_hash"]) == 64
    assert "cli-steer  approval  cli-steer/1/call_0_0  write_file(" in inbox.stdout
    assert sent.returncode == 0 and "signal accepted by the server" in sent.stdout
    assert wrong.returncode == 2 and "no open approval request" in wrong.stderr
    assert approved.returncode == 0 and "applied" in approved.stdout
    assert result.terminal_reason is TerminalReason.COMPLETED


async def test_signals_work_with_no_worker(agent: Agent, settings: Settings) -> None:
    run_id = await agent.client.start_run(RunSpec(task="nobody works here"))
    outputs = [
        await asyncio.to_thread(run_cli, settings, *args)
        for args in (
            ("pause", run_id),
            ("send", run_id, "queued while no worker runs"),
            ("resume", run_id),
            ("cancel", run_id, "--reason", "done with it"),
        )
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    assert all("signal accepted by the server" in o.stdout for o in outputs)
    async with agent.serving([]) as live:
        result = await live.client.result(run_id)
    assert result.terminal_reason is TerminalReason.CANCELLED and result.error == "done with it"

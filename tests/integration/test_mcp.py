"""MCP servers through the durable loop: real servers from PyPI (mcp-server-time, mcp-server-git)
and test servers over stdio, and a streamable-HTTP server written with the SDK's server API."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.activities.tools.mcp import McpTools, load_mcp_config
from capstan.audit.history import decode_history, load_histories
from capstan.core.activity_io import RunToolInput
from capstan.core.spec import TerminalReason
from capstan.core.tooling import ToolCatalog, ToolSucceeded
from capstan.runtime.blobstore import ContentStore, LocalBlobStore
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.conftest import free_port
from tests.integration.helpers import history_events, run_cli
from tests.integration.mcp_fixtures import (
    GIT_ENV,
    HttpServer,
    garbage_server,
    git,
    git_repo,
    git_server,
    kit_server,
    serve_http,
    time_server,
    write_config,
)
from tests.integration.scripted_agent import Agent, Run
from tests.integration.steer_helpers import wait_pending

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
SECRET = "web-secret-token-0123456789"


@pytest.fixture
def web() -> Iterator[HttpServer]:
    yield from serve_http(free_port())


async def catalog_of(agent: Agent, run_id: str) -> ToolCatalog:
    runs = [decode_history(h) for h in await load_histories(agent.temporal, run_id)]
    found = [e.result for r in runs for e in r if isinstance(e.result, ToolCatalog)]
    return found[0]


def observations(run: Run, name: str) -> list[str]:
    return [c.observation or "" for s in run.steps for c in s.tool_calls if c.name == name]


@pytest.mark.slow
async def test_a_run_lists_calls_and_finishes(agent: Agent, tmp_path: Path) -> None:
    """mcp-server-time and mcp-server-git over stdio: listed into history, called, fenced,
    audited like any other tool, and the run replays without a server."""
    repo = git_repo(tmp_path)
    agent.configure(mcp_file=write_config(tmp_path, time_server(), git_server(repo)))
    script = [
        say(
            call("time__get_current_time", timezone="UTC"),
            call("git__git_status", repo_path=str(repo)),
        ),
        say(call("finish", answer="it is time")),
    ]
    run = await agent.run(script, max_steps=4, env=GIT_ENV)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    (now,) = observations(run, "time__get_current_time")
    assert json.loads(now)["timezone"] == "UTC"
    (status,) = observations(run, "git__git_status")
    assert "staged.txt" in status
    # the model was offered the servers' tools and saw their output fenced as data
    offered = {t["function"]["name"] for t in run.requests[0]["tools"]}
    assert {"time__get_current_time", "git__git_status", "git__git_reset"} <= offered
    assert "git__git_checkout" not in offered  # denied in the MCP file
    assert all("<untrusted-data" in m["content"] for m in run.messages(1, "tool"))
    # the catalog, with each tool's origin and annotations, is in the run's history
    catalog = await catalog_of(agent, run.run_id)
    assert catalog.tools["git__git_status"].read_only
    assert not catalog.tools["git__git_reset"].read_only
    assert catalog.tools["time__get_current_time"].untrusted_output
    specs = {
        s["name"]: s for s in json.loads(run.client.content().read_bytes(catalog.specs_ref.sha256))
    }
    origin = specs["git__git_reset"]["origin"]
    assert origin["server"] == "git" and origin["name"] == "git_reset"
    assert origin["annotations"]["destructiveHint"] is True
    # the audit shows MCP calls like any other tool call
    out = await asyncio.to_thread(run_cli, agent.settings, "audit", run.run_id, "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    calls = {r["tool"]: r for r in records if r["kind"] == "tool_call"}
    assert set(calls) == {"time__get_current_time", "git__git_status"}
    assert calls["git__git_status"]["idempotency_key"] == f"{run.run_id}/1/call_0_1"
    assert "staged.txt" in calls["git__git_status"]["result"]
    # replay never asks a live server: the catalog and every result come from history
    out = await asyncio.to_thread(run_cli, agent.settings, "replay", run.run_id)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
async def test_a_destructive_git_tool_waits_for_approval(agent: Agent, tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    agent.configure(mcp_file=write_config(tmp_path, git_server(repo)))
    script = [
        say(call("git__git_reset", repo_path=str(repo))),
        say(call("git__git_diff_staged", repo_path=str(repo))),
        say(call("finish", answer="unstaged")),
    ]
    async with agent.serving(script, env=GIT_ENV) as live:
        run_id = await live.start(agent.spec(max_steps=5))
        pending = await wait_pending(live.client, run_id, timeout=60)
        (request,) = pending.approvals
        assert request.tool == "git__git_reset" and "changes state" in request.reason
        assert "staged.txt" in git(repo, "diff", "--cached", "--name-only")  # not run yet
        await live.client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
        run = await live.finish(run_id, timeout=60)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    assert git(repo, "diff", "--cached", "--name-only") == ""  # the reset ran, once approved
    assert [r.action for r in run.view.records] == ["approve"]
    (diff,) = observations(run, "git__git_diff_staged")  # read-only: no approval needed
    assert "staged.txt" not in diff


@pytest.mark.slow
async def test_a_session_belongs_to_the_worker_not_the_run(agent: Agent, tmp_path: Path) -> None:
    """Every run on a worker shares its server process (and whatever the server keeps in
    memory); another worker has its own. Runs must not rely on it: `_meta` names the run."""
    agent.configure(mcp_file=write_config(tmp_path, kit_server(tmp_path)))
    script = [say(call("kit__count")), say(call("kit__count")), say(call("finish", answer="ok"))]
    counts: list[tuple[str, int]] = []
    for _ in range(2):
        async with agent.serving(script) as live:
            for _ in range(2):
                run = await live.finish(await live.start(agent.spec(max_steps=4)), timeout=60)
                assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
                for seen in observations(run, "kit__count"):
                    pid, count = re.fullmatch(r"pid (\d+) count (\d+)", seen).groups()  # type: ignore[union-attr]
                    counts.append((pid, int(count)))
    first, second = counts[:4], counts[4:]
    assert [c for _, c in first] == [1, 2, 3, 4] and len({p for p, _ in first}) == 1
    assert [c for _, c in second] == [1, 2, 3, 4] and len({p for p, _ in second}) == 1
    assert first[0][0] != second[0][0]


async def test_a_streamable_http_server(agent: Agent, tmp_path: Path, web: HttpServer) -> None:
    """Headers come from the worker's environment and never reach history; the idempotency key
    and run id ride in `_meta`; an error result is an observation."""
    config = f"""
[servers.web]
url = "{web.url}"
headers = {{ Authorization = "Bearer ${{WEB_TOKEN}}" }}
timeout_seconds = 20
"""
    agent.configure(mcp_file=write_config(tmp_path, config))
    script = [
        say(call("web__echo", text="hello"), call("web__fail", reason="out of paper")),
        say(call("finish", answer="HELLO")),
    ]
    run = await agent.run(script, max_steps=4, env={"WEB_TOKEN": SECRET})
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    assert observations(run, "web__echo") == ["HELLO"]
    (failed,) = observations(run, "web__fail")
    assert "out of paper" in failed
    assert web.seen["authorization"] == [f"Bearer {SECRET}"]
    (meta,) = web.seen["meta"]
    assert meta["capstan/idempotency_key"] == f"{run.run_id}/1/call_0_0"
    assert meta["capstan/run_id"] == run.run_id
    history = json.dumps(await history_events(run.handle))
    assert SECRET not in history and "WEB_TOKEN" not in history


async def test_cancelling_a_run_cancels_the_mcp_request(
    agent: Agent, tmp_path: Path, web: HttpServer
) -> None:
    agent.configure(mcp_file=write_config(tmp_path, f'[servers.web]\nurl = "{web.url}"'))
    script = [say(call("web__slow")), say(call("finish", answer="never"))]
    async with agent.serving(script) as live:
        run_id = await live.start(agent.spec(max_steps=3))
        assert await asyncio.to_thread(web.started.wait, 60)
        await live.client.cancel(run_id, reason="enough")
        run = await live.finish(run_id, timeout=60)
    assert run.result.terminal_reason is TerminalReason.CANCELLED
    assert await asyncio.to_thread(web.cancelled.wait, 30)  # the server's handler was cancelled


@pytest.mark.slow
async def test_misbehaving_servers_become_observations(agent: Agent, tmp_path: Path) -> None:
    """Garbage instead of a reply, a frozen server, a server that exits mid-call: each is a
    clear observation and the run goes on; a frozen or exited server is started afresh."""
    config = write_config(tmp_path, kit_server(tmp_path), garbage_server())
    agent.configure(mcp_file=config)
    script = [
        say(call("junk__garble")),
        say(call("kit__freeze")),
        say(call("kit__die")),
        say(call("kit__picture"), call("kit__refuse", reason="no such thing")),
        say(call("finish", answer="survived")),
    ]
    run = await agent.run(script, max_steps=6, auto_approve=True, timeout=120)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    (garbled,) = observations(run, "junk__garble")
    assert "no answer within 3 s" in garbled and "<<this is not JSON-RPC>>" in garbled
    (frozen,) = observations(run, "kit__freeze")
    assert "MCP server kit, tool freeze: no answer within 3 s; cancelled" in frozen
    (died,) = observations(run, "kit__die")
    assert "MCP server kit, tool die: the connection broke during the call" in died
    (picture,) = observations(run, "kit__picture")
    digest = re.search(r"image image/png, 26 bytes, stored as blob sha256:([0-9a-f]{64})", picture)
    assert digest is not None
    assert run.client.content().read_bytes(digest.group(1)).startswith(b"\x89PNG")
    (refused,) = observations(run, "kit__refuse")
    assert "no such thing" in refused
    # the call that killed the server was retried on a fresh one, then given up
    events = await history_events(run.handle)
    attempts = [
        e["activityTaskStartedEventAttributes"].get("attempt", 1)
        for e in events
        if "activityTaskStartedEventAttributes" in e
    ]
    assert max(attempts) == 3


async def test_a_server_down_at_listing(agent: Agent, tmp_path: Path) -> None:
    """Down: the run goes on without its tools, with a diagnostic in the catalog, unless the
    run's allowed_tools needs it: then the run fails, naming the server."""
    down = '[servers.gone]\ncommand = "/nonexistent/mcp-server"\n'
    agent.configure(mcp_file=write_config(tmp_path, down, time_server()))
    script = [say(call("time__get_current_time", timezone="UTC")), say(call("finish", answer="ok"))]
    async with agent.serving(script) as live:
        run = await live.finish(await live.start(agent.spec(max_steps=3)), timeout=60)
        needs = agent.spec(max_steps=3, allowed_tools=("gone__status", "time__*"))
        failed = await live.finish(await live.start(needs), timeout=60)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    catalog = await catalog_of(agent, run.run_id)
    assert "time__get_current_time" in catalog.names
    assert not any(n.startswith("gone__") for n in catalog.names)
    (diagnostic,) = catalog.diagnostics
    assert diagnostic.startswith("cannot start MCP server gone: No such file or directory")
    assert diagnostic in run.status.diagnostics  # `capstan status` says why the tools are missing
    assert failed.result.terminal_reason is TerminalReason.FAILED
    assert failed.result.error == (
        "could not list the run's tools: cannot start MCP server gone: No such file or "
        "directory (/nonexistent/mcp-server); the run's allowed_tools needs it (gone__status)"
    )


async def test_the_worker_refuses_a_broken_mcp_file_in_one_line(
    settings: Settings, tmp_path: Path
) -> None:
    path = write_config(tmp_path, "[servers.git\n")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        "CAPSTAN_MCP": str(path),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "capstan.worker", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    text = stderr.decode()
    assert process.returncode == 2 and "Traceback" not in text
    assert f"CAPSTAN_MCP={path}: the MCP file is not valid TOML" in text.strip().splitlines()[-1]


async def test_a_server_that_died_while_idle_is_restarted(tmp_path: Path) -> None:
    """Between runs the worker's server process may die; the next listing starts it afresh
    instead of leaving its tools out of the run."""
    config = load_mcp_config(write_config(tmp_path, kit_server(tmp_path)), {})
    tools = McpTools(config, {}, ContentStore(LocalBlobStore(tmp_path / "blobs")))

    async def count() -> tuple[int, int]:
        request = RunToolInput(
            run_id="r", step=1, call_id="c", name="kit__count", arguments="{}", idempotency_key="k"
        )
        outcome = await tools.call(request)
        assert isinstance(outcome, ToolSucceeded) and isinstance(outcome.output, str)
        pid, n = re.fullmatch(r"pid (\d+) count (\d+)", outcome.output).groups()  # type: ignore[union-attr]
        return int(pid), int(n)

    async with tools.pool.lifetime():
        first = await tools.listing(None)
        pid, _ = await count()
        os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(_wait_dead, pid)
        again = await tools.listing(None)
        assert [s.name for s in again.specs] == [s.name for s in first.specs]
        assert again.diagnostics == []
        new_pid, n = await count()
    assert new_pid != pid and n == 1


def _wait_dead(pid: int) -> None:
    """Until the process is gone or a zombie (this process has not reaped it yet)."""
    for _ in range(200):
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} survived SIGKILL")

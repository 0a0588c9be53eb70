"""The MCP Inspector's command line (npm, pinned) against Capstan's MCP server, as a person
debugging an MCP set-up would use it: over streamable HTTP on `capstan serve` (its own
process, a bearer token) and over stdio (`capstan mcp`). It lists the tools, starts a run,
approves its write, reads the result and the audit; with no token it is refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capstan.core.spec import TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.integration import outside
from tests.integration.helpers import ROOT
from tests.integration.scripted_agent import Agent

pytestmark = [pytest.mark.server, pytest.mark.slow]

#: the Inspector, pinned; bump it here on purpose
INSPECTOR = {"@modelcontextprotocol/inspector": "2.12.0"}
TOKEN = "inspector-token-0123456789abcdef"


class Inspector:
    """`mcp-inspector --cli` against one target; each call's JSON answer."""

    def __init__(self, target: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        self.binary = outside.npm_bin("mcp-inspector", INSPECTOR, "mcp-inspector")
        self.target = target
        self.env = {**os.environ, "MCP_CATALOG_PATH": str(tmp / "catalog.json"), **(env or {})}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), "--cli", *self.target, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
            cwd=ROOT,
            check=False,
        )

    def ask(self, *args: str) -> Any:
        done = self.run(*args)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        return json.loads(done.stdout)

    def tool(self, name: str, **arguments: str) -> Any:
        pairs = [f"{k}={v}" for k, v in arguments.items()]
        answer = self.ask("--method", "tools/call", "--tool-name", name, "--tool-arg", *pairs)
        assert not answer.get("isError"), answer
        content = answer.get("structuredContent")
        if isinstance(content, dict):
            return content.get("result", content)
        return json.loads(answer["content"][0]["text"])


def drive(inspector: Inspector, task: str) -> dict[str, Any]:
    """List the tools, start a run, approve its one request, wait for the result, read the
    audit: what the Inspector saw at each point."""
    tools = inspector.ask("--method", "tools/list")["tools"]
    run_id = inspector.tool("start_run", task=task)["run_id"]
    approvals: list[Any] = []
    for _ in range(100):
        approvals = inspector.tool("pending", run_id=run_id)["approvals"]
        if approvals:
            break
    approved = inspector.ask(
        "--method", "tools/call", "--tool-name", "approve", "--tool-arg", f"run_id={run_id}"
    )
    result = inspector.tool("run_result", run_id=run_id, wait_seconds="60")
    audit = inspector.ask("--method", "resources/read", "--uri", f"capstan://runs/{run_id}/audit")
    return {
        "tools": {t["name"]: t for t in tools},
        "run_id": run_id,
        "approvals": approvals,
        "approved": approved,
        "result": result,
        "audit": audit["contents"][0]["text"],
    }


def writes(step: int, messages: list[dict[str, Any]]) -> Any:
    task = next(m["content"] for m in messages if m["role"] == "user")
    path = f"{str(task).split()[-1]}.txt"
    if step == 0:
        return say(call("write_file", path=path, content="from the Inspector"))
    return say(call("finish", answer=f"wrote {path}"))


def check(seen: dict[str, Any], path: str) -> None:
    tools = seen["tools"]
    assert set(tools) >= {"start_run", "run_status", "pending", "approve", "deny", "review"}
    assert tools["run_status"]["annotations"]["readOnlyHint"] is True
    assert tools["approve"]["annotations"]["readOnlyHint"] is False
    (request,) = seen["approvals"]
    assert request["tool"] == "write_file" and path in request["arguments"]
    assert seen["approved"]["content"][0]["text"] == "approved"
    assert seen["result"]["terminal_reason"] == TerminalReason.COMPLETED.value
    assert seen["result"]["output"] == f"wrote {path}"
    assert f"run `{seen['run_id']}`" in seen["audit"]


@pytest.mark.parametrize("command", [("serve",), ("mcp", "--http")], ids=["serve", "mcp-http"])
async def test_the_inspector_over_http_with_a_token(
    agent: Agent, settings: Settings, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`capstan serve` answers at /mcp; `capstan mcp --http` serves only that."""
    env = {"CAPSTAN_API_TOKEN": TOKEN}
    async with agent.serving(writes):
        with outside.serve_process(settings, tmp_path / "serve.log", env, command) as base:
            url = [f"{base}/mcp", "--transport", "http"]
            inspector = Inspector([*url, "--header", f"Authorization: Bearer {TOKEN}"], tmp_path)
            seen = await _in_thread(drive, inspector, "write http")
            bare = Inspector(url, tmp_path)  # no token: the Inspector may not start an OAuth flow
            anonymous = await _in_thread(bare.run, "--stored-auth-only", "--method", "tools/list")
    check(seen, "http.txt")
    assert anonymous.returncode != 0
    # the server's 401 is what makes the Inspector ask for authorization
    assert '"auth_required"' in anonymous.stdout + anonymous.stderr


async def test_the_inspector_over_stdio(agent: Agent, settings: Settings, tmp_path: Path) -> None:
    env = {
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
    }
    passed = [item for k, v in env.items() for item in ("-e", f"{k}={v}")]
    async with agent.serving(writes):
        inspector = Inspector([*passed, sys.executable, "-m", "capstan", "mcp"], tmp_path)
        seen = await _in_thread(drive, inspector, "write stdio")
    check(seen, "stdio.txt")


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Blocking subprocess calls off the event loop, where the worker runs."""
    return await asyncio.to_thread(fn, *args)

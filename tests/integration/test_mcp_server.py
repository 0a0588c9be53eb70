"""`capstan mcp` (issue 33, its MCP part): a model client drives a durable run through the MCP
SDK's own client over stdio: starts it, sees the approval it waits on, approves it, reads the
result and the audit; an unknown run is a tool error of one line."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import ROOT
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server


def _server(agent: Agent) -> StdioServerParameters:
    settings = agent.settings
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "capstan", "mcp"], env=env, cwd=str(ROOT)
    )


def _data(result: Any) -> Any:
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(result.content[0].text)


async def test_a_model_client_drives_a_durable_run(agent: Agent, workspace) -> None:
    script = [
        say(call("write_file", path="mcp.txt", content="from a model client")),
        say(call("finish", answer="wrote mcp.txt")),
    ]
    async with agent.serving(script), Client(_server(agent)) as mcp:
        names = {tool.name for tool in (await mcp.list_tools()).tools}
        started = _data(await mcp.call_tool("start_run", {"task": "write the file"}))
        run_id = started["run_id"]
        waiting: dict[str, Any] = {}
        for _ in range(100):
            waiting = _data(await mcp.call_tool("pending", {"run_id": run_id}))
            if waiting["approvals"]:
                break
        (request,) = waiting["approvals"]
        approved = await mcp.call_tool("approve", {"run_id": run_id, "reason": "fine"})
        result = _data(await mcp.call_tool("run_result", {"run_id": run_id, "wait_seconds": 60}))
        audit = await mcp.read_resource(f"capstan://runs/{run_id}/audit")
        unknown = await mcp.call_tool("run_status", {"run_id": "no-such-run"})
        again = await mcp.call_tool("approve", {"run_id": run_id})
    assert names >= {"start_run", "run_status", "run_result", "pending", "approve", "deny"}
    assert request["tool"] == "write_file" and not approved.is_error
    assert result["ended"] and result["terminal_reason"] == TerminalReason.COMPLETED.value
    assert result["output"] == "wrote mcp.txt"
    assert (workspace / "mcp.txt").read_text() == "from a model client"
    text = audit.contents[0].text
    assert f"run `{run_id}`" in text and "write_file" in text
    assert unknown.is_error and "no-such-run" in unknown.content[0].text
    assert "\n" not in unknown.content[0].text
    assert again.is_error  # nothing is open any more: one line saying so
